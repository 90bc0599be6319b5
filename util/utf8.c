/* utf8.c: see utf8.h. */
#include "util/utf8.h"

int tp_utf8_sequence(const unsigned char *p)
{
    if (p[0] < 0x80)
        return 1;
    int n;
    unsigned min;
    if ((p[0] & 0xE0) == 0xC0) {
        n = 2;
        min = 0x80;
    } else if ((p[0] & 0xF0) == 0xE0) {
        n = 3;
        min = 0x800;
    } else if ((p[0] & 0xF8) == 0xF0) {
        n = 4;
        min = 0x10000;
    } else {
        return 0;
    }
    unsigned cp = p[0] & (0x7Fu >> n);
    for (int i = 1; i < n; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3Fu);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}
