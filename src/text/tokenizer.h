/* tokenizer.h: internals shared by tokenizer.c (tables, decode, llama2.c
 * loader), tokenizer_spm.c, tokenizer_bpe.c and tokenizer_gguf.c, plus the
 * array constructor tests use to build tiny vocabularies by hand. Not part
 * of the public API. */
#ifndef SP_TOKENIZER_INTERNAL_H
#define SP_TOKENIZER_INTERNAL_H

#include "sp_tokenizer.h"
#include "gguf.h"

/* Token types, numbered as llama.cpp's llama_token_type / GGUF
 * tokenizer.ggml.token_type. */
enum {
    SP_TOKT_UNDEFINED = 0,
    SP_TOKT_NORMAL = 1,
    SP_TOKT_UNKNOWN = 2,
    SP_TOKT_CONTROL = 3,
    SP_TOKT_USER_DEFINED = 4,
    SP_TOKT_UNUSED = 5,
    SP_TOKT_BYTE = 6
};

/* BPE pre-tokeniser flavour (tokenizer.ggml.pre). */
typedef enum sp_tok_pre {
    SP_PRE_GPT2 = 0,   /* GPT-2 regex ("gpt-2", "mpt", "olmo", ...) */
    SP_PRE_LLAMA3 = 1, /* "llama-bpe": Llama-3 regex, merges ignored for whole-token words */
    SP_PRE_QWEN2 = 2,  /* "qwen2": the Llama-3 regex with single digits (\p{N}), merges kept */
    SP_PRE_DIGITS = 3, /* "starcoder", "refact", ...: each \p{N} alone, then the GPT-2 regex */
    SP_PRE_DEEPSEEK_LLM = 4, /* "deepseek-llm": llama.cpp's list of six regexes, in turn */
    SP_PRE_FALCON = 5, /* "falcon": punctuation runs, GPT-2 between them, then 3-digit groups */
    SP_PRE_DEFAULT = 6, /* "default" or no tokenizer.ggml.pre (llama.cpp's default regex list):
                         * runs of [\p{P}$+<=>^~|], GPT-2 between them, \p{N}+ split off, then
                         * 3-digit groups */
    SP_PRE_DEEPSEEK_CODER = 7, /* "deepseek-coder": llama.cpp's list of five regexes, in turn */
    SP_PRE_O200K = 8, /* "gpt-4o" (gpt-oss's o200k): case-split letter runs, 3-digit numbers */
    SP_PRE_QWEN35 = 9 /* "qwen35": the Qwen2 rules with letter runs [\p{L}\p{M}]+ (marks join) */
} sp_tok_pre;

/* Everything a tokenizer is built from. Arrays are copied; ids are -1 when
 * absent. types may be NULL (then inferred: "<0xNN>" pieces are byte tokens
 * for SPM, bos/eos/eot/eom are control, unk is unknown, the rest normal).
 * scores may be NULL (all 0). merges ("left right" strings, rank = index)
 * are required for BPE and ignored for SPM. */
typedef struct sp_tokenizer_spec {
    sp_tokenizer_kind kind;
    int32_t n_vocab;
    const sp_str *tokens;
    const float *scores;
    const int32_t *types;
    const sp_str *merges;
    int64_t n_merges;
    int32_t bos, eos, unk, eot, eom;
    bool add_bos;
    bool add_space_prefix; /* SPM: prepend " " to the text (SentencePiece add_dummy_prefix) */
    sp_tok_pre pre;        /* BPE only */
} sp_tokenizer_spec;

/* Validates spec (ids in range, non-empty vocabulary, well-formed merges)
 * and builds the tokenizer: token hash table, decoded pieces, byte tables,
 * merge table. SP_ERR_FORMAT with a message naming the problem. */
sp_status sp_tokenizer_init_spec(const sp_tokenizer_spec *spec, sp_tokenizer **out,
                                 sp_error *err);

/* Open-addressing hash of byte strings -> id (or, for merges, of id pairs). */
typedef struct sp_tok_hash {
    uint32_t mask;  /* capacity - 1, capacity a power of two */
    int32_t *slots; /* token id, or -1 for empty */
} sp_tok_hash;

typedef struct sp_tok_merge {
    uint64_t key; /* (uint64)left << 32 | right; UINT64_MAX = empty slot */
    int32_t rank;
    int32_t result;
} sp_tok_merge;

struct sp_tokenizer {
    sp_tokenizer_kind kind;
    int32_t n_vocab;
    char *text;       /* arena of token strings (raw vocabulary form) */
    uint32_t *off;    /* [n_vocab + 1] offsets into text */
    char *piece;      /* arena of decoded pieces (what the token prints as) */
    uint32_t *poff;   /* [n_vocab + 1] offsets into piece */
    float *scores;    /* [n_vocab] */
    uint8_t *types;   /* [n_vocab] SP_TOKT_* */
    sp_tok_hash map;  /* token text -> id (later ids win on duplicates, as llama.cpp) */
    int32_t bos, eos, unk, eot, eom;
    int32_t eog[16];  /* end-of-generation ids (eos, eot, eom, known EOT-like controls:
                         room for all 3 + 10 of them) */
    int32_t n_eog;
    bool add_bos;
    bool add_space_prefix;
    bool escape_spaces; /* SPM vocabulary stores spaces as U+2581 */
    int32_t byte_tok[256]; /* SPM: id of <0xNN>; BPE: id of the byte's unicode char; -1 */
    /* User-defined tokens, matched literally in the input, longest first. */
    int32_t *ud;
    int32_t n_ud;
    uint8_t ud_first[32]; /* bitmap of first bytes of user-defined tokens */
    int32_t *sp;          /* control and user-defined tokens, longest first (parse_special) */
    int32_t n_sp;
    uint8_t sp_first[32];
    /* BPE */
    sp_tok_pre pre;
    sp_tok_merge *merges; /* open addressing, merge_mask + 1 slots */
    uint32_t merge_mask;
};

/* Output accumulator: ids past cap are counted, not written. */
typedef struct sp_tok_out {
    int32_t *ids;
    int32_t cap;
    int32_t n;
} sp_tok_out;

static inline void sp_tok_push(sp_tok_out *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* Id of the token whose text is s[0..n), or -1. */
int32_t sp_tok_lookup(const sp_tokenizer *t, const char *s, size_t n);

/* Encode one plain-text fragment (no user-defined tokens inside).
 * first_or_after_special: SPM adds its dummy prefix only then. */
sp_status sp_tok_spm_encode(const sp_tokenizer *t, const char *text, size_t len,
                            bool first_or_after_special, sp_tok_out *o, sp_error *err);
sp_status sp_tok_bpe_encode(const sp_tokenizer *t, const char *text, size_t len, sp_tok_out *o,
                            sp_error *err);

/* BPE helpers (tokenizer_bpe.c). */
/* Code point the GPT-2 byte-to-unicode map assigns to byte b. */
uint32_t sp_tok_byte_to_cp(uint8_t b);
/* Inverse map: byte for code point cp, or -1 if cp is not in the image. */
int sp_tok_cp_to_byte(uint32_t cp);
/* Pre-tokenisation: sets cut[i] = 1 at every word boundary of text[0, len)
 * (cut[0] and cut[len] included); cut has len + 1 bytes, zero on entry. */
void sp_tok_pretok_split(sp_tok_pre pre, const char *text, size_t len, uint8_t *cut);
/* Builds t->merges from "left right" strings; SP_ERR_FORMAT on a malformed one. */
sp_status sp_tok_bpe_build_merges(sp_tokenizer *t, const sp_str *merges, int64_t n,
                                  sp_error *err);

/* UTF-8 helpers. Length of the sequence starting with lead byte c as
 * llama.cpp counts it (1 for continuation/invalid bytes). */
static inline size_t sp_utf8_len(uint8_t c) {
    static const uint8_t lens[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lens[c >> 4];
}
/* Decode one code point at s[0..n); returns its byte length (>= 1). Invalid
 * or truncated sequences decode as one byte with *cp = 0x110000 + byte. */
size_t sp_utf8_decode(const char *s, size_t n, uint32_t *cp);
/* Encode cp as UTF-8 into out (4 bytes room); returns the length. */
size_t sp_utf8_encode(uint32_t cp, char *out);

sp_tokenizer_kind sp_tokenizer_kind_of(const sp_tokenizer *t);

#endif
