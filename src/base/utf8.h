/* utf8.h: UTF-8 validation (RFC 3629) and repair, for generated text that
 * leaves the engine as a string (JSON output): a token can end inside a
 * character, and byte-fallback tokens can produce any byte sequence. */
#ifndef SP_UTF8_H
#define SP_UTF8_H

#include <stddef.h>

/* Length (1-4) of the valid UTF-8 sequence starting at s[0] within s[0..n),
 * n >= 1, or 0 if there is none: overlong forms, surrogates (U+D800..DFFF),
 * code points above U+10FFFF, stray continuation bytes and truncated
 * sequences are invalid. */
size_t sp_utf8_seq_len(const char *s, size_t n);

/* Number of bytes of s[0..n) that belong to no valid sequence. */
size_t sp_utf8_invalid_bytes(const char *s, size_t n);

/* Copies s[0..n) to dst, keeping valid sequences and replacing each byte
 * that belongs to none with U+FFFD (EF BF BD). dst holds at least
 * n + 2 * sp_utf8_invalid_bytes(s, n) bytes (3 n always suffices); no
 * terminator is written. Returns the bytes written. */
size_t sp_utf8_repair(const char *s, size_t n, char *dst);

#endif
