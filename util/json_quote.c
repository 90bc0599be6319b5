/* json_quote.c: see json_quote.h. */
#include "util/json_quote.h"

#include <stdint.h>

/* The length of the valid UTF-8 sequence at p (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), or 0. */
static size_t utf8_length(const unsigned char *p)
{
    size_t n;
    uint32_t cp;
    if (p[0] < 0x80)
        return 1;
    if ((p[0] & 0xE0) == 0xC0)
        n = 2, cp = p[0] & 0x1F;
    else if ((p[0] & 0xF0) == 0xE0)
        n = 3, cp = p[0] & 0x0F;
    else if ((p[0] & 0xF8) == 0xF0)
        n = 4, cp = p[0] & 0x07;
    else
        return 0;
    for (size_t i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80) /* also stops at the NUL */
            return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

void tp_buf_append_json_string(tp_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    tp_buf_append_char(b, '"', 1);
    while (*p) {
        const unsigned char c = *p;
        const size_t n = utf8_length(p);
        if (n == 0) {
            tp_buf_append(b, "\\ufffd");
            p++;
        } else if (c == '"' || c == '\\') {
            const char esc[2] = {'\\', (char)c};
            tp_buf_append_n(b, esc, 2);
            p++;
        } else if (c < 0x20) {
            const char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            tp_buf_append_n(b, esc, 6);
            p++;
        } else {
            tp_buf_append_n(b, (const char *)p, n);
            p += n;
        }
    }
    tp_buf_append_char(b, '"', 1);
}
