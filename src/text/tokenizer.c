/* tokenizer: vocabulary tables shared by both tokenizer families (token hash,
 * decoded pieces, byte tokens, user-defined tokens), the llama2.c
 * tokenizer.bin loader, encode dispatch and decoding. The SPM and BPE merge
 * loops live in tokenizer_spm.c / tokenizer_bpe.c, GGUF loading in
 * tokenizer_gguf.c (kept apart so programs without the GGUF reader link). */
#include "tokenizer.h"
#include "file.h"
#include "gguf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 ---- */

size_t sp_utf8_decode(const char *s, size_t n, uint32_t *cp) {
    const uint8_t *u = (const uint8_t *)s;
    uint8_t c = u[0];
    size_t len;
    uint32_t v, min;
    if (c < 0x80) {
        *cp = c;
        return 1;
    } else if ((c & 0xE0) == 0xC0) {
        len = 2, v = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
        len = 3, v = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
        len = 4, v = c & 0x07, min = 0x10000;
    } else {
        goto bad;
    }
    if (len > n) goto bad;
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xC0) != 0x80) goto bad;
        v = (v << 6) | (u[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) goto bad;
    *cp = v;
    return len;
bad:
    *cp = 0x110000u + c;
    return 1;
}

size_t sp_utf8_encode(uint32_t cp, char *out) {
    uint8_t *o = (uint8_t *)out;
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    } else if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    } else if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- token hash ---- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

static inline sp_str tok_text(const sp_tokenizer *t, int32_t id) {
    sp_str s = {t->text + t->off[id], t->off[id + 1] - t->off[id]};
    return s;
}

int32_t sp_tok_lookup(const sp_tokenizer *t, const char *s, size_t n) {
    uint32_t i = (uint32_t)hash_bytes(s, n) & t->map.mask;
    for (;;) {
        int32_t id = t->map.slots[i];
        if (id < 0) return -1;
        sp_str k = tok_text(t, id);
        if (k.len == n && memcmp(k.ptr, s, n) == 0) return id;
        i = (i + 1) & t->map.mask;
    }
}

static sp_status build_map(sp_tokenizer *t, sp_error *err) {
    uint32_t cap = 16;
    while (cap < (uint32_t)t->n_vocab * 2u) cap <<= 1;
    t->map.mask = cap - 1;
    t->map.slots = malloc((size_t)cap * sizeof *t->map.slots);
    if (!t->map.slots) return sp_fail(err, SP_ERR_NOMEM, "tokenizer: out of memory");
    memset(t->map.slots, 0xFF, (size_t)cap * sizeof *t->map.slots);
    for (int32_t id = 0; id < t->n_vocab; id++) {
        sp_str k = tok_text(t, id);
        uint32_t i = (uint32_t)hash_bytes(k.ptr, k.len) & t->map.mask;
        for (;;) {
            int32_t o = t->map.slots[i];
            if (o < 0) {
                t->map.slots[i] = id;
                break;
            }
            sp_str ko = tok_text(t, o);
            if (ko.len == k.len && memcmp(ko.ptr, k.ptr, k.len) == 0) {
                t->map.slots[i] = id; /* duplicate text: the later id wins */
                break;
            }
            i = (i + 1) & t->map.mask;
        }
    }
    return SP_OK;
}

/* ---- construction ---- */

/* Parses "<0xNN>" (uppercase or lowercase hex); returns the byte or -1. */
static int parse_byte_token(const char *s, size_t n) {
    if (n != 6 || s[0] != '<' || s[1] != '0' || s[2] != 'x' || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = (c >= '0' && c <= '9') ? c - '0'
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static bool contains_u2581(sp_str s) {
    for (uint64_t i = 0; i + 2 < s.len; i++)
        if ((uint8_t)s.ptr[i] == 0xE2 && (uint8_t)s.ptr[i + 1] == 0x96 &&
            (uint8_t)s.ptr[i + 2] == 0x81)
            return true;
    return false;
}

/* Writes the printed form of token id into dst (capacity >= its text length);
 * returns its length. */
static size_t make_piece(const sp_tokenizer *t, int32_t id, char *dst) {
    sp_str s = tok_text(t, id);
    uint8_t ty = t->types[id];
    if (ty == SP_TOKT_CONTROL || ty == SP_TOKT_UNKNOWN || ty == SP_TOKT_UNUSED) return 0;
    if (ty == SP_TOKT_USER_DEFINED) {
        memcpy(dst, s.ptr, s.len);
        return s.len;
    }
    if (t->kind == SP_TOK_SPM) {
        if (ty == SP_TOKT_BYTE) {
            int b = parse_byte_token(s.ptr, s.len);
            if (b >= 0) {
                dst[0] = (char)b;
                return 1;
            }
        }
        size_t n = 0;
        for (uint64_t i = 0; i < s.len; i++) {
            if (t->escape_spaces && i + 2 < s.len && (uint8_t)s.ptr[i] == 0xE2 &&
                (uint8_t)s.ptr[i + 1] == 0x96 && (uint8_t)s.ptr[i + 2] == 0x81) {
                dst[n++] = ' ';
                i += 2;
            } else {
                dst[n++] = s.ptr[i];
            }
        }
        return n;
    }
    /* BPE: map byte-level code points back to bytes; anything outside the
     * map (not produced by the byte encoder) is copied as UTF-8. */
    size_t n = 0;
    for (uint64_t i = 0; i < s.len;) {
        uint32_t cp;
        size_t l = sp_utf8_decode(s.ptr + i, s.len - i, &cp);
        int b = cp < 0x110000 ? sp_tok_cp_to_byte(cp) : -1;
        if (b >= 0) {
            dst[n++] = (char)b;
        } else {
            memcpy(dst + n, s.ptr + i, l);
            n += l;
        }
        i += l;
    }
    return n;
}

static void add_eog(sp_tokenizer *t, int32_t id) {
    if (id < 0) return;
    for (int32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return;
    if (t->n_eog < (int32_t)(sizeof t->eog / sizeof t->eog[0])) t->eog[t->n_eog++] = id;
}

static int cmp_ud_len_desc(const void *a, const void *b, void *ctx) {
    const sp_tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint32_t lx = t->off[x + 1] - t->off[x], ly = t->off[y + 1] - t->off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : (x > y);
}

/* Step 1: the spec's shape (kind, special ids, merges, token lengths and
 * types); *total receives the vocabulary's text bytes. */
static sp_status spec_check(const sp_tokenizer_spec *spec, uint64_t *total, sp_error *err) {
    if (spec->kind != SP_TOK_SPM && spec->kind != SP_TOK_BPE)
        return sp_fail(err, SP_ERR_ARG, "tokenizer: unknown kind %d", (int)spec->kind);
    if (spec->n_vocab <= 0 || !spec->tokens)
        return sp_fail(err, SP_ERR_FORMAT, "tokenizer: empty vocabulary");
    const int32_t nv = spec->n_vocab;
    const struct {
        const char *name;
        int32_t id;
    } ids[] = {{"bos", spec->bos}, {"eos", spec->eos}, {"unknown", spec->unk},
               {"eot", spec->eot}, {"eom", spec->eom}};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        if (ids[i].id < -1 || ids[i].id >= nv)
            return sp_fail(err, SP_ERR_FORMAT, "tokenizer: %s token id %d out of range [0, %d)",
                           ids[i].name, (int)ids[i].id, (int)nv);
    if (spec->kind == SP_TOK_BPE && (spec->n_merges < 0 || (spec->n_merges > 0 && !spec->merges)))
        return sp_fail(err, SP_ERR_FORMAT, "tokenizer: bpe merges missing");
    *total = 0;
    for (int32_t i = 0; i < nv; i++) {
        if (spec->tokens[i].len > 4096)
            return sp_fail(err, SP_ERR_FORMAT, "tokenizer: token %d is %llu bytes long (max 4096)",
                           (int)i, (unsigned long long)spec->tokens[i].len);
        *total += spec->tokens[i].len;
    }
    if (*total > (1u << 30)) return sp_fail(err, SP_ERR_FORMAT, "tokenizer: vocabulary text too large");
    if (spec->types)
        for (int32_t i = 0; i < nv; i++)
            if (spec->types[i] < 0 || spec->types[i] > SP_TOKT_BYTE)
                return sp_fail(err, SP_ERR_FORMAT, "tokenizer: token %d has invalid type %d",
                               (int)i, (int)spec->types[i]);
    return SP_OK;
}

/* Step 2: copy the token texts and scores; every token gets a type (given,
 * or inferred: specials are control, <0xNN> in SPM are bytes). */
static void copy_vocab(sp_tokenizer *t, const sp_tokenizer_spec *spec) {
    const int32_t nv = spec->n_vocab;
    uint32_t o = 0;
    for (int32_t i = 0; i < nv; i++) {
        t->off[i] = o;
        if (spec->tokens[i].len) memcpy(t->text + o, spec->tokens[i].ptr, spec->tokens[i].len);
        o += (uint32_t)spec->tokens[i].len;
        t->scores[i] = spec->scores ? spec->scores[i] : 0.0f;
        if (contains_u2581(spec->tokens[i])) t->escape_spaces = true;
    }
    t->off[nv] = o;
    if (spec->kind != SP_TOK_SPM) t->escape_spaces = false;
    for (int32_t i = 0; i < nv; i++) {
        if (spec->types && spec->types[i] != SP_TOKT_UNDEFINED) {
            t->types[i] = (uint8_t)spec->types[i];
            continue;
        }
        sp_str s = tok_text(t, i);
        uint8_t ty = SP_TOKT_NORMAL;
        if (i == t->bos || i == t->eos || i == t->eot || i == t->eom) ty = SP_TOKT_CONTROL;
        else if (i == t->unk) ty = SP_TOKT_UNKNOWN;
        else if (t->kind == SP_TOK_SPM && parse_byte_token(s.ptr, s.len) >= 0) ty = SP_TOKT_BYTE;
        t->types[i] = ty;
    }
}

/* Step 3: the token for each byte (SPM: <0xNN> tokens; byte-level BPE: the
 * byte's character) and, for BPE, the merge ranks. */
static sp_status build_bytes_and_merges(sp_tokenizer *t, const sp_tokenizer_spec *spec, sp_error *err) {
    for (int b = 0; b < 256; b++) t->byte_tok[b] = -1;
    if (t->kind == SP_TOK_SPM) {
        for (int32_t i = 0; i < t->n_vocab; i++) {
            if (t->types[i] != SP_TOKT_BYTE) continue;
            sp_str s = tok_text(t, i);
            int b = parse_byte_token(s.ptr, s.len);
            if (b >= 0 && t->byte_tok[b] < 0) t->byte_tok[b] = i;
        }
        return SP_OK;
    }
    for (int b = 0; b < 256; b++) {
        char u[4];
        size_t l = sp_utf8_encode(sp_tok_byte_to_cp((uint8_t)b), u);
        t->byte_tok[b] = sp_tok_lookup(t, u, l);
    }
    return sp_tok_bpe_build_merges(t, spec->merges, spec->n_merges, err);
}

/* llama.cpp's end-of-generation set: eos, eot, eom and its EOT-like token
 * texts (llama-vocab.cpp), so that e.g. a Llama 3 Instruct file whose eos
 * is <|eot_id|> still stops at <|end_of_text|>; only control tokens, so
 * plain text never ends a run. Then its o200k_harmony rules: <|channel|>,
 * <|message|>, <|start|> and <|constrain|> are user-defined (matched in
 * plain text too), and with <|return|> and <|call|> in the set, <|end|>
 * leaves it and is user-defined (a harmony message's end, not the run's). */
static void eog_and_harmony(sp_tokenizer *t) {
    add_eog(t, t->eos);
    add_eog(t, t->eot);
    add_eog(t, t->eom);
    static const char *const eog_names[] = {
        "<|eot_id|>",      "<|eom_id|>", "<|im_end|>", "<|end|>",           "<end_of_turn>",
        "<|endoftext|>",   "<|end_of_text|>", "<EOT>", "_<EOT>", "<end_of_utterance>",
        "<|return|>",      "<|call|>"};
    _Static_assert(3 + sizeof eog_names / sizeof eog_names[0] <= sizeof t->eog / sizeof t->eog[0],
                   "eog holds eos, eot, eom and every named one");
    for (size_t i = 0; i < sizeof eog_names / sizeof eog_names[0]; i++) {
        int32_t id = sp_tok_lookup(t, eog_names[i], strlen(eog_names[i]));
        if (id >= 0 && t->types[id] == SP_TOKT_CONTROL) add_eog(t, id);
    }
    static const char *const harmony_ud[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"};
    for (size_t i = 0; i < sizeof harmony_ud / sizeof harmony_ud[0]; i++) {
        int32_t id = sp_tok_lookup(t, harmony_ud[i], strlen(harmony_ud[i]));
        if (id >= 0) t->types[id] = SP_TOKT_USER_DEFINED;
    }
    int32_t ret = -1, call = -1, end = -1;
    for (int32_t i = 0; i < t->n_eog; i++) {
        const int32_t id = t->eog[i];
        const size_t n = t->off[id + 1] - t->off[id];
        const char *x = t->text + t->off[id];
        if (n == 10 && !memcmp(x, "<|return|>", 10)) ret = i;
        else if (n == 8 && !memcmp(x, "<|call|>", 8)) call = i;
        else if (n == 7 && !memcmp(x, "<|end|>", 7)) end = i;
    }
    if (ret >= 0 && call >= 0 && end >= 0) {
        t->types[t->eog[end]] = SP_TOKT_USER_DEFINED;
        memmove(t->eog + end, t->eog + end + 1, (size_t)(t->n_eog - end - 1) * sizeof t->eog[0]);
        t->n_eog--;
    }
}

/* Step 4: the end-of-generation set, printable pieces, user-defined tokens
 * (longest first, for literal matching). */
static void build_pieces_and_specials(sp_tokenizer *t) {
    const int32_t nv = t->n_vocab;
    eog_and_harmony(t);
    uint32_t po = 0;
    for (int32_t i = 0; i < nv; i++) {
        t->poff[i] = po;
        po += (uint32_t)make_piece(t, i, t->piece + po);
    }
    t->poff[nv] = po;
    for (int32_t i = 0; i < nv; i++)
        if (t->types[i] == SP_TOKT_USER_DEFINED && t->off[i + 1] > t->off[i]) {
            t->ud[t->n_ud++] = i;
            uint8_t c = (uint8_t)t->text[t->off[i]];
            t->ud_first[c >> 3] |= (uint8_t)(1u << (c & 7));
        }
    qsort_r(t->ud, (size_t)t->n_ud, sizeof *t->ud, cmp_ud_len_desc, t);
    for (int32_t i = 0; i < nv; i++)
        if ((t->types[i] == SP_TOKT_USER_DEFINED || t->types[i] == SP_TOKT_CONTROL) && t->off[i + 1] > t->off[i]) {
            t->sp[t->n_sp++] = i;
            uint8_t c = (uint8_t)t->text[t->off[i]];
            t->sp_first[c >> 3] |= (uint8_t)(1u << (c & 7));
        }
    qsort_r(t->sp, (size_t)t->n_sp, sizeof *t->sp, cmp_ud_len_desc, t);
}

sp_status sp_tokenizer_init_spec(const sp_tokenizer_spec *spec, sp_tokenizer **out,
                                 sp_error *err) {
    *out = NULL;
    uint64_t total = 0;
    sp_status st = spec_check(spec, &total, err);
    if (st) return st;
    const int32_t nv = spec->n_vocab;
    sp_tokenizer *t = calloc(1, sizeof *t);
    if (!t) return sp_fail(err, SP_ERR_NOMEM, "tokenizer: out of memory");
    t->kind = spec->kind;
    t->n_vocab = nv;
    t->bos = spec->bos, t->eos = spec->eos, t->unk = spec->unk;
    t->eot = spec->eot, t->eom = spec->eom;
    t->add_bos = spec->add_bos;
    t->add_space_prefix = spec->add_space_prefix;
    t->pre = spec->pre;
    t->text = malloc(total + 1);
    t->off = malloc(((size_t)nv + 1) * sizeof *t->off);
    t->piece = malloc(total + 1); /* a printed piece is never longer than its token */
    t->poff = malloc(((size_t)nv + 1) * sizeof *t->poff);
    t->scores = malloc((size_t)nv * sizeof *t->scores);
    t->types = malloc((size_t)nv);
    t->ud = malloc((size_t)nv * sizeof *t->ud);
    t->sp = malloc((size_t)nv * sizeof *t->sp);
    if (!t->text || !t->off || !t->piece || !t->poff || !t->scores || !t->types || !t->ud || !t->sp) {
        sp_tokenizer_free(t);
        return sp_fail(err, SP_ERR_NOMEM, "tokenizer: out of memory for %d tokens", (int)nv);
    }
    copy_vocab(t, spec);
    if ((st = build_map(t, err)) || (st = build_bytes_and_merges(t, spec, err))) {
        sp_tokenizer_free(t);
        return st;
    }
    build_pieces_and_specials(t);
    *out = t;
    return SP_OK;
}

void sp_tokenizer_free(sp_tokenizer *t) {
    if (!t) return;
    free(t->text);
    free(t->off);
    free(t->piece);
    free(t->poff);
    free(t->scores);
    free(t->types);
    free(t->ud);
    free(t->sp);
    free(t->map.slots);
    free(t->merges);
    free(t);
}

/* ---- llama2.c tokenizer.bin ---- */

sp_status sp_tokenizer_load_llama2c(const char *path, int32_t vocab_size, sp_tokenizer **out,
                                    sp_error *err) {
    if (!out) return sp_fail(err, SP_ERR_ARG, "tokenizer: out is NULL");
    *out = NULL;
    if (vocab_size < 3)
        return sp_fail(err, SP_ERR_ARG, "tokenizer: vocab_size %d too small (need >= 3)",
                       (int)vocab_size);
    char *buf = NULL;
    size_t size = 0;
    /* 64 MiB: far above any real vocabulary (tok512.bin is 6 KiB, 128k-token
     * vocabularies under 2 MiB) */
    sp_status st = sp_file_read(path, "tokenizer", 64u << 20, &buf, &size, err);
    if (st) return st;
    sp_str *toks = malloc((size_t)vocab_size * sizeof *toks);
    float *scores = malloc((size_t)vocab_size * sizeof *scores);
    if (!toks || !scores) {
        st = sp_fail(err, SP_ERR_NOMEM, "tokenizer: out of memory reading %s", path);
        goto done;
    }
    size_t pos = 4; /* skip max_token_length */
    if (size < pos) {
        st = sp_fail(err, SP_ERR_FORMAT, "tokenizer: %s is truncated (no header)", path);
        goto done;
    }
    for (int32_t i = 0; i < vocab_size; i++) {
        int32_t len;
        if (size - pos < 8) {
            st = sp_fail(err, SP_ERR_FORMAT, "tokenizer: %s truncated at token %d of %d", path,
                         (int)i, (int)vocab_size);
            goto done;
        }
        memcpy(&scores[i], buf + pos, 4);
        memcpy(&len, buf + pos + 4, 4);
        pos += 8;
        if (len < 0 || (size_t)len > size - pos) {
            st = sp_fail(err, SP_ERR_FORMAT, "tokenizer: %s token %d has bad length %d", path,
                         (int)i, (int)len);
            goto done;
        }
        toks[i].ptr = buf + pos;
        toks[i].len = (uint64_t)len;
        pos += (size_t)len;
    }
    sp_tokenizer_spec spec = {
        .kind = SP_TOK_SPM, .n_vocab = vocab_size, .tokens = toks, .scores = scores,
        .bos = 1, .eos = 2, .unk = 0, .eot = -1, .eom = -1,
        .add_bos = true, .add_space_prefix = true,
    };
    st = sp_tokenizer_init_spec(&spec, out, err);
done:
    free(buf);
    free(toks);
    free(scores);
    return st;
}

/* ---- accessors ---- */

sp_tokenizer_kind sp_tokenizer_kind_of(const sp_tokenizer *t) { return t->kind; }
int32_t sp_tokenizer_n_vocab(const sp_tokenizer *t) { return t->n_vocab; }
int32_t sp_tokenizer_bos(const sp_tokenizer *t) { return t->bos; }
int32_t sp_tokenizer_eos(const sp_tokenizer *t) { return t->eos; }
bool sp_tokenizer_add_bos(const sp_tokenizer *t) { return t->add_bos; }

bool sp_tokenizer_is_padding(const sp_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) return false;
    char want[24];
    int n = snprintf(want, sizeof want, "[PAD%d]", (int)id);
    sp_str s = tok_text(t, id);
    return s.len == (size_t)n && memcmp(s.ptr, want, (size_t)n) == 0;
}

int32_t sp_tokenizer_n_unpadded(const sp_tokenizer *t) {
    int32_t n = t->n_vocab;
    while (n > 1 && sp_tokenizer_is_padding(t, n - 1)) n--;
    return n;
}

bool sp_tokenizer_is_eog(const sp_tokenizer *t, int32_t id) {
    for (int32_t i = 0; i < t->n_eog; i++)
        if (t->eog[i] == id) return true;
    return false;
}

sp_str sp_tokenizer_token_text(const sp_tokenizer *t, int32_t id) {
    if (id < 0 || id >= t->n_vocab) {
        sp_str e = {"", 0};
        return e;
    }
    return tok_text(t, id);
}

/* ---- encode ---- */

/* Matching one of the listed tokens (longest first) at text[i]; -1 if none. */
static int32_t match_listed(const sp_tokenizer *t, const int32_t *list, int32_t n, const uint8_t *first,
                            const char *text, size_t len, size_t i) {
    uint8_t c = (uint8_t)text[i];
    if (!(first[c >> 3] & (1u << (c & 7)))) return -1;
    for (int32_t k = 0; k < n; k++) {
        sp_str s = tok_text(t, list[k]);
        if (s.len <= len - i && memcmp(text + i, s.ptr, s.len) == 0) return list[k];
    }
    return -1;
}

static sp_status encode_fragment(const sp_tokenizer *t, const char *text, size_t len,
                                 bool first_or_after_special, sp_tok_out *o, sp_error *err) {
    if (len == 0) return SP_OK;
    if (t->kind == SP_TOK_SPM) return sp_tok_spm_encode(t, text, len, first_or_after_special, o, err);
    return sp_tok_bpe_encode(t, text, len, o, err);
}

sp_status sp_tokenizer_encode(const sp_tokenizer *t, const char *text, size_t len, bool add_bos,
                              int32_t *out, int32_t cap, int32_t *n_out, sp_error *err) {
    sp_tok_encode_params p = {.add_bos = add_bos, .parse_special = false};
    return sp_tokenizer_encode_ex(t, text, len, &p, out, cap, n_out, err);
}

sp_status sp_tokenizer_encode_ex(const sp_tokenizer *t, const char *text, size_t len,
                                 const sp_tok_encode_params *p, int32_t *out, int32_t cap,
                                 int32_t *n_out, sp_error *err) {
    const bool add_bos = p && p->add_bos, special = p && p->parse_special;
    if (n_out) *n_out = 0;
    if (!t || (!text && len) || cap < 0 || (!out && cap > 0) || !n_out)
        return sp_fail(err, SP_ERR_ARG, "tokenizer_encode: bad arguments");
    if (len > (size_t)INT32_MAX / 8)
        return sp_fail(err, SP_ERR_RANGE, "tokenizer_encode: text of %zu bytes is too long", len);
    sp_tok_out o = {out, cap, 0};
    if (add_bos) {
        if (t->bos < 0) return sp_fail(err, SP_ERR_STATE, "tokenizer_encode: vocabulary has no BOS");
        sp_tok_push(&o, t->bos);
    }
    sp_status st = SP_OK;
    size_t seg = 0;
    bool after_special = true;
    const int32_t *list = special ? t->sp : t->ud;
    const int32_t n_list = special ? t->n_sp : t->n_ud;
    const uint8_t *first = special ? t->sp_first : t->ud_first;
    if (n_list > 0) {
        for (size_t i = 0; i < len;) {
            int32_t id = match_listed(t, list, n_list, first, text, len, i);
            if (id < 0) {
                i++;
                continue;
            }
            if ((st = encode_fragment(t, text + seg, i - seg, after_special, &o, err)) != SP_OK)
                return st;
            if (i > seg) after_special = false;
            sp_tok_push(&o, id);
            after_special = true;
            i += t->off[id + 1] - t->off[id];
            seg = i;
        }
    }
    if ((st = encode_fragment(t, text + seg, len - seg, after_special, &o, err)) != SP_OK) return st;
    *n_out = o.n;
    if (o.n > cap)
        return sp_fail(err, SP_ERR_RANGE, "tokenizer_encode: %d tokens do not fit in %d",
                       (int)o.n, (int)cap);
    return SP_OK;
}

/* ---- decode ---- */

/* The printed piece of id after prev (SPM drops the leading space of the
 * first piece after BOS). */
static sp_str piece_of(const sp_tokenizer *t, int32_t prev, int32_t id) {
    sp_str p = {"", 0};
    if (id < 0 || id >= t->n_vocab) return p;
    p.ptr = t->piece + t->poff[id];
    p.len = t->poff[id + 1] - t->poff[id];
    if (t->kind == SP_TOK_SPM && prev >= 0 && prev == t->bos && p.len > 0 && p.ptr[0] == ' ') {
        p.ptr++;
        p.len--;
    }
    return p;
}

size_t sp_tokenizer_decode_token(const sp_tokenizer *t, int32_t prev, int32_t id, char *buf,
                                 size_t cap) {
    sp_str p = piece_of(t, prev, id);
    size_t n = p.len < cap ? (size_t)p.len : cap;
    if (n) memcpy(buf, p.ptr, n);
    return n;
}

size_t sp_tokenizer_decode(const sp_tokenizer *t, const int32_t *ids, int32_t n, char *buf,
                           size_t cap) {
    size_t total = 0;
    for (int32_t i = 0; i < n; i++) {
        sp_str p = piece_of(t, i > 0 ? ids[i - 1] : -1, ids[i]);
        if (cap > 0 && total < cap - 1) {
            size_t room = cap - 1 - total;
            memcpy(buf + total, p.ptr, p.len < room ? (size_t)p.len : room);
        }
        total += p.len;
    }
    if (cap > 0) buf[total < cap - 1 ? total : cap - 1] = '\0';
    return total;
}
