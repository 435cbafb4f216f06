/* tokenizer_bpe: GPT-2 byte-level BPE. The text is split into words by a
 * hand-written equivalent of the GPT-2 (or Llama-3) pre-tokeniser regex; each
 * word starts as one symbol per byte (the token of that byte's character in
 * the GPT-2 byte-to-unicode map) and the adjacent pair with the lowest merge
 * rank is merged until no ranked pair is left (left-most on equal ranks).
 * Merges are keyed by (left id, right id), so a merge costs one hash probe.
 *
 * Unicode classes come from the generated table (unicode.h: letters L*,
 * numbers N*, White_Space, the rest "other", marks included as in the
 * regexes, except Qwen3.5's, whose letter runs take marks); invalid UTF-8
 * bytes are single "other" characters. The text is
 * not normalised (no NFC), as llama.cpp does not: a decomposed accent stays
 * two code points (Qwen's own Python tokenizer normalises to NFC first and
 * can differ there). */
#include "tokenizer.h"

#include "heap.h"
#include "unicode.h"
#include "gguf.h"

#include <stdlib.h>
#include <string.h>

/* ---- GPT-2 byte <-> unicode ---- */

static inline bool byte_is_printable(unsigned b) {
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

uint32_t sp_tok_byte_to_cp(uint8_t b) {
    if (byte_is_printable(b)) return b;
    if (b <= 0x20) return 256u + b;                  /* 0x00..0x20 -> 256..288 */
    if (b >= 0x7F && b <= 0xA0) return 289u + (b - 0x7Fu); /* -> 289..322 */
    return 323u;                                     /* 0xAD */
}

int sp_tok_cp_to_byte(uint32_t cp) {
    if (cp <= 0xFF) return byte_is_printable(cp) ? (int)cp : -1;
    if (cp <= 288) return (int)(cp - 256);
    if (cp <= 322) return (int)(0x7F + (cp - 289));
    if (cp == 323) return 0xAD;
    return -1;
}

/* ---- character classes ---- */

enum { CL_LETTER, CL_NUMBER, CL_SPACE, CL_OTHER };

static int cp_class_m(uint32_t cp, bool marks) {
    if (cp < 0x80) {
        if ((cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z')) return CL_LETTER;
        if (cp >= '0' && cp <= '9') return CL_NUMBER;
        if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return CL_SPACE;
        return CL_OTHER;
    }
    /* invalid bytes decode above U+10FFFF: "other" */
    switch (sp_unicode_class(cp)) {
    case SP_UCL_LETTER: return CL_LETTER;
    case SP_UCL_NUMBER: return CL_NUMBER;
    case SP_UCL_SPACE: return CL_SPACE;
    case SP_UCL_MARK: return marks ? CL_LETTER : CL_OTHER;
    default: return CL_OTHER; /* punctuation, symbols (and marks but for Qwen3.5): "other" */
    }
}

/* Class and byte length of the character at pos (< len); with marks,
 * combining marks (M*) count as letters (Qwen3.5's [\p{L}\p{M}]). */
static inline int class_at_m(const char *s, size_t len, size_t pos, size_t *clen, bool marks) {
    uint32_t cp;
    *clen = sp_utf8_decode(s + pos, len - pos, &cp);
    return cp_class_m(cp, marks);
}

static inline int class_at(const char *s, size_t len, size_t pos, size_t *clen) {
    return class_at_m(s, len, pos, clen, false);
}

/* Consume characters of class cl from pos; returns the end. */
static size_t run_of_m(const char *s, size_t len, size_t pos, int cl, bool marks) {
    size_t l;
    while (pos < len && class_at_m(s, len, pos, &l, marks) == cl) pos += l;
    return pos;
}

static inline size_t run_of(const char *s, size_t len, size_t pos, int cl) {
    return run_of_m(s, len, pos, cl, false);
}

static inline char lower(char c) { return (c >= 'A' && c <= 'Z') ? (char)(c + 32) : c; }

/* Length of a contraction ('s 't 're 've 'm 'll 'd) at pos, 0 if none. */
static size_t contraction(const char *s, size_t len, size_t pos, bool icase) {
    if (s[pos] != '\'' || pos + 1 >= len) return 0;
    char a = icase ? lower(s[pos + 1]) : s[pos + 1];
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
    if (pos + 2 >= len) return 0;
    char b = icase ? lower(s[pos + 2]) : s[pos + 2];
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
    return 0;
}

/* \s+(?!\S)|\s+ starting at pos (a whitespace character). */
static size_t whitespace_tail(const char *s, size_t len, size_t pos) {
    size_t end = run_of(s, len, pos, CL_SPACE);
    if (end == len) return end;
    /* Followed by non-space: leave the last whitespace character for the
     * next word unless it is the only one. */
    size_t last = pos, l;
    for (size_t p = pos; p < end; p += l) {
        class_at(s, len, p, &l);
        last = p;
    }
    return last > pos ? last : end;
}

/* GPT-2: 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+ */
static size_t next_gpt2(const char *s, size_t len, size_t pos) {
    size_t c = contraction(s, len, pos, false);
    if (c) return pos + c;
    size_t l;
    int cl = class_at(s, len, pos, &l);
    size_t p = pos;
    if (s[pos] == ' ' && pos + 1 < len) {
        size_t l2;
        int cl2 = class_at(s, len, pos + 1, &l2);
        if (cl2 != CL_SPACE) p = pos + 1, cl = cl2;
    }
    if (cl != CL_SPACE) return run_of(s, len, p, cl);
    return whitespace_tail(s, len, pos);
}

/* Llama 3 (max_digits 3) and Qwen2 (max_digits 1):
 * (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,max_digits}|
 *  ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * With marks (Qwen3.5, max_digits 1), \p{L} above is [\p{L}\p{M}] except in
 * the optional first character's class, which is still [^\r\n\p{L}\p{N}]
 * (a mark there is taken by the letter run all the same). */
static size_t next_llama3(const char *s, size_t len, size_t pos, int max_digits, bool marks) {
    size_t c = contraction(s, len, pos, true);
    if (c) return pos + c;
    size_t l;
    int cl = class_at_m(s, len, pos, &l, marks);
    if (cl == CL_LETTER) return run_of_m(s, len, pos, CL_LETTER, marks);
    if (cl != CL_NUMBER && s[pos] != '\r' && s[pos] != '\n' && pos + l < len) {
        size_t l2;
        if (class_at_m(s, len, pos + l, &l2, marks) == CL_LETTER)
            return run_of_m(s, len, pos + l, CL_LETTER, marks);
    }
    if (cl == CL_NUMBER) {
        size_t p = pos;
        for (int k = 0; k < max_digits && p < len && class_at(s, len, p, &l) == CL_NUMBER; k++) p += l;
        return p;
    }
    size_t p = pos;
    if (s[pos] == ' ' && pos + 1 < len && class_at_m(s, len, pos + 1, &l, marks) == CL_OTHER) p = pos + 1;
    if (class_at_m(s, len, p, &l, marks) == CL_OTHER) {
        p = run_of_m(s, len, p, CL_OTHER, marks);
        while (p < len && (s[p] == '\r' || s[p] == '\n')) p++;
        return p;
    }
    /* Whitespace: \s*[\r\n]+ takes the run up to its last newline. */
    size_t end = run_of(s, len, pos, CL_SPACE), nl = 0;
    for (size_t q = pos; q < end; q++)
        if (s[q] == '\r' || s[q] == '\n') nl = q + 1;
    if (nl) return nl;
    return whitespace_tail(s, len, pos);
}

/* o200k ("gpt-4o", gpt-oss) as llama.cpp runs it: std::regex over text in
 * which every non-ASCII code point stands for its class (letters one
 * placeholder, so [^a-z] and [^A-Z] both take any non-ASCII letter, and
 * combining marks are "other"):
 *   [^\r\n\p{L}\p{N}]?U*W+C?|[^\r\n\p{L}\p{N}]?U+W*C?|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * with U = a letter but a-z, W = a letter but A-Z, C = a contraction
 * ('s 't 're 've 'm 'll 'd, letters of either case), backtracking as
 * ECMAScript does (the first alternative that matches, each quantifier as
 * long as the rest still matches). */
static inline bool o200k_u(const char *s, size_t len, size_t p, size_t *l) {
    return class_at(s, len, p, l) == CL_LETTER && !(s[p] >= 'a' && s[p] <= 'z');
}
static inline bool o200k_w(const char *s, size_t len, size_t p, size_t *l) {
    return class_at(s, len, p, l) == CL_LETTER && !(s[p] >= 'A' && s[p] <= 'Z');
}

/* U*W+ (want_w) or U+W* at q, then C?; 0 if no match. The U run ends at
 * b; W+ starts at b when a-z is there (the only W that is not U), else at
 * the run's last non-ASCII letter (then W+ is that one letter, as the next
 * is A-Z or ends the run). */
static size_t o200k_word(const char *s, size_t len, size_t q, bool want_w) {
    size_t b = q, l, last_w = SIZE_MAX, last_wl = 0;
    while (b < len && o200k_u(s, len, b, &l)) {
        if (!(s[b] >= 'A' && s[b] <= 'Z')) last_w = b, last_wl = l;
        b += l;
    }
    size_t end;
    if (b < len && s[b] >= 'a' && s[b] <= 'z') {
        end = b;
        while (end < len && o200k_w(s, len, end, &l)) end += l;
    } else if (want_w) {
        if (last_w == SIZE_MAX) return 0;
        end = last_w + last_wl;
    } else {
        if (b == q) return 0;
        end = b; /* W* matches nothing here: b is not a-z and not U */
    }
    return end + (end < len ? contraction(s, len, end, true) : 0);
}

static size_t next_o200k(const char *s, size_t len, size_t pos) {
    size_t l;
    const int cl = class_at(s, len, pos, &l);
    /* the optional leading character: anything but \r, \n, letters, numbers */
    const size_t q = cl != CL_LETTER && cl != CL_NUMBER && s[pos] != '\r' && s[pos] != '\n' ? pos + l : pos;
    if (q < len) {
        size_t e = o200k_word(s, len, q, true);
        if (!e) e = o200k_word(s, len, q, false);
        if (e) return e;
    }
    if (cl == CL_NUMBER) {
        size_t p = pos;
        for (int k = 0; k < 3 && p < len && class_at(s, len, p, &l) == CL_NUMBER; k++) p += l;
        return p;
    }
    size_t p = pos;
    if (s[pos] == ' ' && pos + 1 < len && class_at(s, len, pos + 1, &l) == CL_OTHER) p = pos + 1;
    if (class_at(s, len, p, &l) == CL_OTHER) {
        p = run_of(s, len, p, CL_OTHER);
        while (p < len && (s[p] == '\r' || s[p] == '\n' || s[p] == '/')) p++;
        return p;
    }
    /* whitespace: \s*[\r\n]+ takes the run up to its last newline */
    size_t end = run_of(s, len, pos, CL_SPACE), nl = 0;
    for (size_t r = pos; r < end; r++)
        if (s[r] == '\r' || s[r] == '\n') nl = r + 1;
    if (nl) return nl;
    return whitespace_tail(s, len, pos);
}

/* StarCoder / Refact: every \p{N} is a word of its own, and the GPT-2 regex
 * runs on the text between them (so " 12" is " ", "1", "2"). */
static size_t next_digits(const char *s, size_t len, size_t pos, bool runs) {
    size_t l;
    if (class_at(s, len, pos, &l) == CL_NUMBER) return runs ? run_of(s, len, pos, CL_NUMBER) : pos + l;
    /* the GPT-2 word, cut before the next number */
    size_t end = next_gpt2(s, len, pos);
    for (size_t p = pos; p < end; p += l)
        if (class_at(s, len, p, &l) == CL_NUMBER) return p > pos ? p : p + l;
    return end;
}

/* Falcon: runs of [\p{P}$+<=>^~|`] are words; between them the GPT-2
 * regex; then every 3 ASCII digits in a row ([0-9][0-9][0-9]) are split
 * off as words of their own (llama.cpp applies the three regexes in turn,
 * each splitting the pieces of the one before). llama.cpp's default list
 * (no or "default" tokenizer.ggml.pre) is the same without the backtick
 * and with \p{N}+ applied after GPT-2 (" 123" becomes " ", "123"). */
static bool falcon_punct(const char *s, size_t len, size_t pos, bool deflt, size_t *clen) {
    uint32_t cp;
    *clen = sp_utf8_decode(s + pos, len - pos, &cp);
    if (cp < 0x80 && strchr(deflt ? "$+<=>^~|" : "$+<=>^~|`", (int)cp) && cp) return true;
    return cp < 0x110000 && sp_unicode_class(cp) == SP_UCL_PUNCT;
}

static size_t next_falcon(const char *s, size_t len, size_t pos, bool deflt) {
    size_t l;
    if (falcon_punct(s, len, pos, deflt, &l)) {
        size_t p = pos + l;
        while (p < len && falcon_punct(s, len, p, deflt, &l)) p += l;
        return p;
    }
    size_t fe = pos; /* the fragment ends at the next punctuation run */
    while (fe < len && !falcon_punct(s, len, fe, deflt, &l)) fe += l;
    const size_t end = deflt ? next_digits(s, fe, pos, true) : next_gpt2(s, fe, pos);
    for (size_t p = pos; p + 3 <= end; p++)
        if (s[p] >= '0' && s[p] <= '9' && s[p + 1] >= '0' && s[p + 1] <= '9' && s[p + 2] >= '0' &&
            s[p + 2] <= '9')
            return p > pos ? p : p + 3;
    return end;
}

/* ---- DeepSeek: llama.cpp's regex lists ----
 * llama.cpp applies each regex of the list in turn to every piece the ones
 * before it left: the matches and the text between them become the new
 * pieces. Its classes, as it evaluates them: \s is ASCII white space or any
 * other White_Space character (it maps those to \v first, so they match
 * no other class); \p{L}, \p{P}, \p{N} are general categories; the rest
 * are code point ranges.
 * deepseek-coder: [\r\n]  \s?\p{L}+  \s?\p{P}+  [CJK]+  \p{N}
 * deepseek-llm:   [\r\n]  \s?[LETTERS]+  \s?[PUNCT]+  \s+$  [CJK]+  \p{N}+ */

typedef struct ds_range {
    uint32_t first, last;
} ds_range;

/* deepseek-llm's letter class: Latin, Greek, Coptic, Cyrillic, Armenian,
 * Georgian, Cherokee and other cased letters, as ranges in its regex */
static const ds_range DS_LLM_LETTERS[] = {
    {0x41, 0x5A}, {0x61, 0x7A}, {0xB5, 0xB5}, {0xC0, 0xD6}, {0xD8, 0xF6}, {0xF8, 0x1BA},
    {0x1BC, 0x1BF}, {0x1C4, 0x293}, {0x295, 0x2AF}, {0x370, 0x373}, {0x376, 0x377}, {0x37B, 0x37D},
    {0x37F, 0x37F}, {0x386, 0x386}, {0x388, 0x38A}, {0x38C, 0x38C}, {0x38E, 0x3A1}, {0x3A3, 0x3F5},
    {0x3F7, 0x481}, {0x48A, 0x52F}, {0x531, 0x556}, {0x10A0, 0x10C5}, {0x13A0, 0x13F5},
    {0x13F8, 0x13FD}, {0x1C90, 0x1CBA}, {0x1CBD, 0x1CBF}, {0x1D00, 0x1D2B}, {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A}, {0x1E00, 0x1F15}, {0x1F18, 0x1F1D}, {0x1F20, 0x1F45}, {0x1F48, 0x1F4D},
    {0x1F50, 0x1F57}, {0x1F59, 0x1F59}, {0x1F5B, 0x1F5B}, {0x1F5D, 0x1F5D}, {0x1F5F, 0x1F7D},
    {0x1F80, 0x1FB4}, {0x1FB6, 0x1FBC}, {0x1FBE, 0x1FBE}, {0x1FC2, 0x1FC4}, {0x1FC6, 0x1FCC},
    {0x1FD0, 0x1FD3}, {0x1FD6, 0x1FDB}, {0x1FE0, 0x1FEC}, {0x1FF2, 0x1FF4}, {0x1FF6, 0x1FFC},
    {0x2102, 0x2102}, {0x2107, 0x2107}, {0x210A, 0x2113}, {0x2115, 0x2115}, {0x2119, 0x211D},
    {0x2124, 0x2124}, {0x2126, 0x2126}, {0x2128, 0x2128}, {0x212A, 0x212D}, {0x212F, 0x2134},
    {0x2139, 0x2139}, {0x213C, 0x213F}, {0x2145, 0x2149}, {0x214E, 0x214E}, {0x2183, 0x2184},
    {0x2C00, 0x2C7B}, {0x2C7E, 0x2CE4}, {0x2CEB, 0x2CEE}, {0x2CF2, 0x2CF3}, {0xA640, 0xA66D},
    {0xA680, 0xA69B}, {0xA722, 0xA76F}, {0xA771, 0xA787}, {0xA78B, 0xA78E}, {0xAB70, 0xABBF},
    {0xFB00, 0xFB06}, {0xFB13, 0xFB17}, {0xFF21, 0xFF3A}, {0xFF41, 0xFF5A}, {0x10400, 0x1044F},
    {0x104B0, 0x104D3}, {0x104D8, 0x104FB}, {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2},
    {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
/* deepseek-llm's punctuation: [!-/:-~！-／：-～‘-‟　-。] (ASCII letters
 * included: they are split off by the letter regex before) */
static const ds_range DS_LLM_PUNCTS[] = {{0x21, 0x2F},     {0x3A, 0x7E},     {0x2018, 0x201F},
                                        {0x3000, 0x3002}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E}};
/* [一-龥ࠀ-一가-퟿]: U+4E00-U+9FA5, U+0800-U+4E00, U+AC00-U+D7FF */
static const ds_range DS_CJK[] = {{0x800, 0x9FA5}, {0xAC00, 0xD7FF}};

static bool ds_in(const ds_range *r, size_t n, uint32_t cp) {
    for (size_t i = 0; i < n; i++)
        if (cp >= r[i].first && cp <= r[i].last) return true;
    return false;
}

typedef enum {
    DS_NEWLINE, DS_SPACE, DS_LETTER, DS_PUNCT, DS_NUMBER, DS_LLM_LETTER, DS_LLM_PUNCT, DS_CJK_RUN
} ds_cls;

static bool ds_is(ds_cls c, uint32_t cp) {
    if (c == DS_NEWLINE) return cp == '\r' || cp == '\n';
    const bool ws = cp < 0x80 ? cp == ' ' || (cp >= 0x09 && cp <= 0x0D)
                              : cp <= 0x10FFFF && sp_unicode_class(cp) == SP_UCL_SPACE;
    if (c == DS_SPACE) return ws;
    if (ws) return false;
    switch (c) {
    case DS_LETTER: return cp <= 0x10FFFF && sp_unicode_class(cp) == SP_UCL_LETTER;
    case DS_PUNCT: return cp <= 0x10FFFF && sp_unicode_class(cp) == SP_UCL_PUNCT;
    case DS_NUMBER: return cp <= 0x10FFFF && sp_unicode_class(cp) == SP_UCL_NUMBER;
    case DS_LLM_LETTER: return ds_in(DS_LLM_LETTERS, sizeof DS_LLM_LETTERS / sizeof DS_LLM_LETTERS[0], cp);
    case DS_LLM_PUNCT: return ds_in(DS_LLM_PUNCTS, sizeof DS_LLM_PUNCTS / sizeof DS_LLM_PUNCTS[0], cp);
    case DS_CJK_RUN: return ds_in(DS_CJK, sizeof DS_CJK / sizeof DS_CJK[0], cp);
    default: return false;
    }
}

static inline bool ds_at(ds_cls c, const char *s, size_t end, size_t q, size_t *clen) {
    uint32_t cp;
    *clen = sp_utf8_decode(s + q, end - q, &cp);
    return ds_is(c, cp);
}

/* One regex of a list: \s?C+ (ws_prefix, run), C+ (run), C (neither), or
 * \s+$ (trailing). */
typedef struct ds_regex {
    ds_cls c;
    bool ws_prefix, run, trailing;
} ds_regex;

/* Leftmost match of r in s[pos, end) (a piece ends at end): its start, or
 * end if none; *mend gets its end. */
static size_t ds_find(const ds_regex *r, const char *s, size_t end, size_t pos, size_t *mend) {
    size_t l, l2;
    if (r->trailing) { /* the white space that reaches the end of the piece */
        size_t t = pos;
        for (size_t q = pos; q < end; q += l)
            if (!ds_at(DS_SPACE, s, end, q, &l)) t = q + l;
        *mend = end;
        return t;
    }
    for (size_t q = pos; q < end; q += l) {
        size_t from;
        if (ds_at(r->c, s, end, q, &l)) from = q;
        else if (r->ws_prefix && ds_at(DS_SPACE, s, end, q, &l) &&
                 q + l < end && ds_at(r->c, s, end, q + l, &l2))
            from = q + l;
        else continue;
        size_t e = from;
        do {
            ds_at(r->c, s, end, e, &l2);
            e += l2;
        } while (r->run && e < end && ds_at(r->c, s, end, e, &l2));
        *mend = e;
        return q;
    }
    *mend = end;
    return end;
}

static const ds_regex DS_CODER[] = {{DS_NEWLINE, false, false, false}, {DS_LETTER, true, true, false},
                                    {DS_PUNCT, true, true, false},    {DS_CJK_RUN, false, true, false},
                                    {DS_NUMBER, false, false, false}};
static const ds_regex DS_LLM[] = {{DS_NEWLINE, false, false, false},  {DS_LLM_LETTER, true, true, false},
                                  {DS_LLM_PUNCT, true, true, false},  {DS_SPACE, false, false, true},
                                  {DS_CJK_RUN, false, true, false},   {DS_NUMBER, false, true, false}};

static void ds_split(const ds_regex *list, size_t n, const char *s, size_t len, uint8_t *cut) {
    for (size_t i = 0; i < n; i++)
        for (size_t a = 0; a < len;) {
            size_t b = a + 1;
            while (b < len && !cut[b]) b++;
            for (size_t p = a, me; p < b; p = me) {
                size_t ms = ds_find(&list[i], s, b, p, &me);
                if (ms >= b) break;
                cut[ms] = cut[me] = 1;
            }
            a = b;
        }
}

static size_t pretok_next(sp_tok_pre pre, const char *text, size_t len, size_t pos) {
    switch (pre) {
    case SP_PRE_LLAMA3: return next_llama3(text, len, pos, 3, false);
    case SP_PRE_QWEN2: return next_llama3(text, len, pos, 1, false);
    case SP_PRE_QWEN35: return next_llama3(text, len, pos, 1, true);
    case SP_PRE_O200K: return next_o200k(text, len, pos);
    case SP_PRE_DIGITS: return next_digits(text, len, pos, false);
    case SP_PRE_FALCON: return next_falcon(text, len, pos, false);
    case SP_PRE_DEFAULT: return next_falcon(text, len, pos, true);
    default: return next_gpt2(text, len, pos);
    }
}

void sp_tok_pretok_split(sp_tok_pre pre, const char *text, size_t len, uint8_t *cut) {
    cut[0] = cut[len] = 1;
    if (pre == SP_PRE_DEEPSEEK_CODER) {
        ds_split(DS_CODER, sizeof DS_CODER / sizeof DS_CODER[0], text, len, cut);
    } else if (pre == SP_PRE_DEEPSEEK_LLM) {
        ds_split(DS_LLM, sizeof DS_LLM / sizeof DS_LLM[0], text, len, cut);
    } else {
        for (size_t pos = 0; pos < len;) {
            size_t end = pretok_next(pre, text, len, pos);
            SP_ASSERT(end > pos && end <= len);
            cut[end] = 1;
            pos = end;
        }
    }
}

/* ---- merges ---- */

static inline uint64_t pair_key(int32_t l, int32_t r) {
    return ((uint64_t)(uint32_t)l << 32) | (uint32_t)r;
}

static inline uint32_t pair_hash(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return (uint32_t)k;
}

static const sp_tok_merge *find_merge(const sp_tokenizer *t, int32_t l, int32_t r) {
    if (!t->merges) return NULL;
    uint64_t k = pair_key(l, r);
    for (uint32_t i = pair_hash(k) & t->merge_mask;; i = (i + 1) & t->merge_mask) {
        const sp_tok_merge *m = &t->merges[i];
        if (m->key == k) return m;
        if (m->key == UINT64_MAX) return NULL;
    }
}

sp_status sp_tok_bpe_build_merges(sp_tokenizer *t, const sp_str *merges, int64_t n,
                                  sp_error *err) {
    if (n > INT32_MAX / 4) return sp_fail(err, SP_ERR_FORMAT, "tokenizer: too many merges");
    uint32_t cap = 16;
    while (cap < (uint64_t)n * 2) cap <<= 1;
    t->merge_mask = cap - 1;
    t->merges = malloc((size_t)cap * sizeof *t->merges);
    if (!t->merges) return sp_fail(err, SP_ERR_NOMEM, "tokenizer: out of memory for merges");
    for (uint32_t i = 0; i < cap; i++) t->merges[i].key = UINT64_MAX;
    char *cat = NULL;
    size_t cat_cap = 0;
    for (int64_t r = 0; r < n; r++) {
        sp_str m = merges[r];
        const char *sp = m.len > 1 ? memchr(m.ptr + 1, ' ', m.len - 1) : NULL;
        if (!sp) {
            free(cat);
            return sp_fail(err, SP_ERR_FORMAT, "tokenizer: merge %lld (\"%.*s\") has no space",
                           (long long)r, (int)(m.len > 40 ? 40 : m.len), m.ptr);
        }
        size_t ll = (size_t)(sp - m.ptr), rl = m.len - ll - 1;
        int32_t li = sp_tok_lookup(t, m.ptr, ll), ri = sp_tok_lookup(t, sp + 1, rl);
        if (li < 0 || ri < 0) continue; /* can never apply */
        if (ll + rl > cat_cap) {
            cat_cap = (ll + rl) * 2;
            char *nc = realloc(cat, cat_cap);
            if (!nc) {
                free(cat);
                return sp_fail(err, SP_ERR_NOMEM, "tokenizer: out of memory for merges");
            }
            cat = nc;
        }
        memcpy(cat, m.ptr, ll);
        memcpy(cat + ll, sp + 1, rl);
        int32_t res = sp_tok_lookup(t, cat, ll + rl);
        if (res < 0) continue; /* result is not a token: ignored */
        uint64_t k = pair_key(li, ri);
        uint32_t i = pair_hash(k) & t->merge_mask;
        while (t->merges[i].key != UINT64_MAX && t->merges[i].key != k) i = (i + 1) & t->merge_mask;
        if (t->merges[i].key == k) continue; /* duplicate: the lower rank stays */
        t->merges[i].key = k;
        t->merges[i].rank = (int32_t)r;
        t->merges[i].result = res;
    }
    free(cat);
    return SP_OK;
}

/* ---- encode ---- */

typedef struct bpe_sym {
    int32_t prev, next, id;
    uint32_t start, n;
} bpe_sym;

typedef struct bpe_bigram {
    int32_t rank, left, right, lid, rid, result;
} bpe_bigram;

static inline int bb_above(const bpe_bigram *a, const bpe_bigram *b) {
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

SP_HEAP_DEFINE(bb, bpe_bigram, bb_above)

static void bb_try(const sp_tokenizer *t, const bpe_sym *sym, int32_t l, int32_t r,
                   bpe_bigram *h, int32_t *nh) {
    if (l < 0 || r < 0 || sym[l].id < 0 || sym[r].id < 0) return;
    const sp_tok_merge *m = find_merge(t, sym[l].id, sym[r].id);
    if (!m) return;
    bpe_bigram b = {m->rank, l, r, sym[l].id, sym[r].id, m->result};
    bb_push(h, nh, b);
}

static sp_status emit_word(const sp_tokenizer *t, const char *w, size_t n, bpe_sym *sym,
                           bpe_bigram *heap, char *mapped, sp_tok_out *o, sp_error *err) {
    if (t->pre == SP_PRE_LLAMA3) { /* ignore_merges: a word that is a token is emitted whole */
        size_t m = 0;
        for (size_t i = 0; i < n; i++) m += sp_utf8_encode(sp_tok_byte_to_cp((uint8_t)w[i]), mapped + m);
        int32_t id = sp_tok_lookup(t, mapped, m);
        if (id >= 0) {
            sp_tok_push(o, id);
            return SP_OK;
        }
    }
    int32_t ns = (int32_t)n, nh = 0;
    for (int32_t i = 0; i < ns; i++) {
        sym[i].prev = i - 1;
        sym[i].next = i + 1 < ns ? i + 1 : -1;
        sym[i].id = t->byte_tok[(uint8_t)w[i]];
        sym[i].start = (uint32_t)i;
        sym[i].n = 1;
    }
    for (int32_t i = 1; i < ns; i++) bb_try(t, sym, i - 1, i, heap, &nh);
    while (nh > 0) {
        bpe_bigram b = bb_pop(heap, &nh);
        bpe_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->next != b.right || l->id != b.lid || r->id != b.rid)
            continue; /* stale */
        l->n += r->n;
        l->id = b.result;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        bb_try(t, sym, l->prev, b.left, heap, &nh);
        bb_try(t, sym, b.left, l->next, heap, &nh);
    }
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = sym[i].next) {
        int32_t id = sym[i].id >= 0 ? sym[i].id : t->unk;
        if (id < 0)
            return sp_fail(err, SP_ERR_ARG,
                           "tokenizer: byte 0x%02X has no token and the vocabulary has no "
                           "unknown token", (uint8_t)w[sym[i].start]);
        sp_tok_push(o, id);
    }
    return SP_OK;
}

sp_status sp_tok_bpe_encode(const sp_tokenizer *t, const char *text, size_t len, sp_tok_out *o,
                            sp_error *err) {
    bpe_sym *sym = malloc(len * sizeof *sym);
    bpe_bigram *heap = malloc(len * 3 * sizeof *heap);
    char *mapped = malloc(len * 2);
    uint8_t *cut = calloc(len + 1, 1);
    sp_status st = SP_OK;
    if (!sym || !heap || !mapped || !cut) {
        st = sp_fail(err, SP_ERR_NOMEM, "tokenizer: out of memory encoding %zu bytes", len);
        goto done;
    }
    sp_tok_pretok_split(t->pre, text, len, cut);
    for (size_t pos = 0; pos < len;) {
        size_t end = pos + 1;
        while (!cut[end]) end++;
        if ((st = emit_word(t, text + pos, end - pos, sym, heap, mapped, o, err)) != SP_OK) break;
        pos = end;
    }
done:
    free(cut);
    free(sym);
    free(heap);
    free(mapped);
    return st;
}
