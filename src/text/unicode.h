/* unicode.h: character classes of code points for the BPE pre-tokenisers,
 * from the generated table src/text/unicode_tables.c (Unicode Character
 * Database; scripts/gen_unicode_tables.py says how it was made). */
#ifndef SP_UNICODE_H
#define SP_UNICODE_H

#include <stdint.h>

typedef enum sp_ucl {
    SP_UCL_LETTER = 0, /* L* */
    SP_UCL_NUMBER = 1, /* N* */
    SP_UCL_SPACE = 2,  /* White_Space */
    SP_UCL_PUNCT = 3,  /* P* */
    SP_UCL_MARK = 4,   /* M*: combining marks (the GPT-2-style regexes count them as "other") */
    SP_UCL_OTHER = 5   /* symbols, controls, unassigned */
} sp_ucl;

typedef struct sp_ucl_range {
    uint32_t first, last;
    uint8_t cls;
} sp_ucl_range;

extern const sp_ucl_range sp_ucl_ranges[];
extern const int sp_ucl_n_ranges;

/* Class of a code point (binary search; > 0x10FFFF is OTHER). */
sp_ucl sp_unicode_class(uint32_t cp);

#endif
