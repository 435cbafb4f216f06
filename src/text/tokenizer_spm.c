/* tokenizer_spm: SentencePiece-style encoding as llama.cpp's SPM tokenizer
 * does it: optional dummy-prefix space, spaces escaped to U+2581 when the
 * vocabulary uses that convention, the text split into UTF-8 characters,
 * then repeatedly the adjacent pair whose concatenation is a token with the
 * highest score is merged (left-most on equal scores), using a binary heap of
 * candidate bigrams with lazy invalidation. Symbols that are not tokens fall
 * back to <0xNN> byte tokens (or one unk when the vocabulary lacks them). */
#include "tokenizer.h"

#include "heap.h"

#include <stdlib.h>
#include <string.h>

typedef struct spm_sym {
    int32_t prev, next; /* -1 at the ends */
    uint32_t start, n;  /* byte range in the escaped text; n = 0 once merged away */
} spm_sym;

typedef struct spm_bigram {
    float score;
    int32_t left;   /* symbol index */
    uint32_t size;  /* combined byte length when pushed (detects stale entries) */
} spm_bigram;

/* Heap order: a above b when its score is higher, or equal and further left. */
static inline int bigram_above(const spm_bigram *a, const spm_bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

SP_HEAP_DEFINE(heap, spm_bigram, bigram_above)

static void try_bigram(const sp_tokenizer *t, const char *buf, const spm_sym *sym, int32_t l,
                       int32_t r, spm_bigram *h, int32_t *nh) {
    if (l < 0 || r < 0) return;
    uint32_t size = sym[l].n + sym[r].n;
    int32_t id = sp_tok_lookup(t, buf + sym[l].start, size);
    if (id < 0) return;
    spm_bigram b = {t->scores[id], l, size};
    heap_push(h, nh, b);
}

sp_status sp_tok_spm_encode(const sp_tokenizer *t, const char *text, size_t len,
                            bool first_or_after_special, sp_tok_out *o, sp_error *err) {
    /* Escaped copy: optional leading space, spaces as U+2581 (3 bytes). */
    /* Every bound below is in escaped bytes (n), not input bytes: an input
     * byte can become three. Symbols are at least one byte (ns <= n) and
     * each merge adds at most two bigrams to the heap (<= 3 n entries). */
    size_t cap = (len + 1) * 3;
    char *buf = malloc(cap);
    spm_sym *sym = malloc(cap * sizeof *sym);
    spm_bigram *heap = malloc(cap * 3 * sizeof *heap);
    if (!buf || !sym || !heap) {
        free(buf), free(sym), free(heap);
        return sp_fail(err, SP_ERR_NOMEM, "tokenizer: out of memory encoding %zu bytes", len);
    }
    size_t n = 0;
    bool prefix = t->add_space_prefix && first_or_after_special;
    for (size_t i = 0; i < len + (prefix ? 1 : 0); i++) {
        char c = prefix ? (i == 0 ? ' ' : text[i - 1]) : text[i];
        if (c == ' ' && t->escape_spaces) {
            buf[n++] = (char)0xE2, buf[n++] = (char)0x96, buf[n++] = (char)0x81;
        } else {
            buf[n++] = c;
        }
    }

    /* One symbol per UTF-8 character. A lead byte not followed by its
     * continuation bytes is a symbol of its own (it falls back to a byte
     * token), so it never swallows the start of the next character, e.g.
     * of an escaped space: "\xE4 " must decode back to E4 20. */
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        size_t l = sp_utf8_len((uint8_t)buf[i]);
        if (l > n - i) l = 1;
        for (size_t k = 1; k < l; k++)
            if (((uint8_t)buf[i + k] & 0xC0) != 0x80) l = 1;
        sym[ns].prev = ns - 1;
        sym[ns].next = i + l < n ? ns + 1 : -1;
        sym[ns].start = (uint32_t)i;
        sym[ns].n = (uint32_t)l;
        ns++;
        i += l;
    }

    /* Each merge adds at most two bigrams: the heap never exceeds 3 * ns. */
    int32_t nh = 0;
    for (int32_t i = 1; i < ns; i++) try_bigram(t, buf, sym, i - 1, i, heap, &nh);
    while (nh > 0) {
        spm_bigram b = heap_pop(heap, &nh);
        spm_sym *l = &sym[b.left];
        if (l->n == 0 || l->next < 0) continue;
        spm_sym *r = &sym[l->next];
        if (r->n == 0 || l->n + r->n != b.size) continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        try_bigram(t, buf, sym, l->prev, b.left, heap, &nh);
        try_bigram(t, buf, sym, b.left, l->next, heap, &nh);
    }

    sp_status st = SP_OK;
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0; i = sym[i].next) {
        int32_t id = sp_tok_lookup(t, buf + sym[i].start, sym[i].n);
        if (id >= 0) {
            sp_tok_push(o, id);
            continue;
        }
        /* Byte fallback; a character with any byte lacking a byte token
         * becomes one unknown token, as SentencePiece does. */
        bool all_bytes = true;
        for (uint32_t k = 0; k < sym[i].n; k++)
            if (t->byte_tok[(uint8_t)buf[sym[i].start + k]] < 0) all_bytes = false;
        if (all_bytes) {
            for (uint32_t k = 0; k < sym[i].n; k++)
                sp_tok_push(o, t->byte_tok[(uint8_t)buf[sym[i].start + k]]);
        } else if (t->unk >= 0) {
            sp_tok_push(o, t->unk);
        } else {
            st = sp_fail(err, SP_ERR_ARG,
                         "tokenizer: character at byte %u is not in the vocabulary, which has "
                         "neither byte tokens for it nor an unknown token", sym[i].start);
            goto done;
        }
    }
done:
    free(buf);
    free(sym);
    free(heap);
    return st;
}
