/* utf8: UTF-8 validation and repair; see utf8.h. */
#include "utf8.h"

#include <string.h>

size_t sp_utf8_seq_len(const char *str, size_t n) {
    const unsigned char *s = (const unsigned char *)str;
    const unsigned char c = s[0];
    unsigned char lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    size_t len;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;      /* below: overlong */
        else if (c == 0xED) hi = 0x9F; /* above: surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;      /* below: overlong */
        else if (c == 0xF4) hi = 0x8F; /* above: beyond U+10FFFF */
    } else {
        return 0; /* continuation byte, C0/C1 (overlong), F5..FF */
    }
    if (n < len || s[1] < lo || s[1] > hi) return 0;
    for (size_t i = 2; i < len; i++)
        if (s[i] < 0x80 || s[i] > 0xBF) return 0;
    return len;
}

size_t sp_utf8_invalid_bytes(const char *s, size_t n) {
    size_t bad = 0;
    for (size_t i = 0; i < n;) {
        size_t k = sp_utf8_seq_len(s + i, n - i);
        bad += k == 0;
        i += k ? k : 1;
    }
    return bad;
}

size_t sp_utf8_repair(const char *s, size_t n, char *dst) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = sp_utf8_seq_len(s + i, n - i);
        if (k) {
            memcpy(dst + o, s + i, k);
            o += k;
            i += k;
        } else {
            memcpy(dst + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    return o;
}
