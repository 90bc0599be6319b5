/* json_quote.c: see json_quote.h. */
#include "util/json_quote.h"

#include "util/utf8.h"

void tp_buf_append_json_string(tp_buf *b, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    const unsigned char *p = (const unsigned char *)(s ? s : "");
    tp_buf_append_char(b, '"', 1);
    while (*p) {
        const unsigned char c = *p;
        const size_t n = (size_t)tp_utf8_sequence(p);
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
