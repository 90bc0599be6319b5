/* utf8.h: where text from outside (source lines, names read from files)
 * meets outputs that must be valid UTF-8 (JSON, SARIF). */
#ifndef TPCC_UTF8_H
#define TPCC_UTF8_H

/* Length of the valid UTF-8 sequence starting at p (RFC 3629: no overlong
 * forms, no surrogates, nothing above U+10FFFF), or 0 when it is not one.
 * Stops at a NUL, because a NUL is never a continuation byte. */
int tp_utf8_sequence(const unsigned char *p);

#endif /* TPCC_UTF8_H */
