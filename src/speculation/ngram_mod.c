/* ngram_mod: llama.cpp's "ngram-mod" drafter; see ngram_mod.h for the method
 * and its contract. */
#include "ngram_mod.h"

#include <stdbool.h>
#include <stdlib.h>

#define SLOTS ((int64_t)4 * 1024 * 1024) /* table entries, as upstream */
#define EMPTY (-1)
#define CHUNK 32         /* output n-grams join the table this many at a time */
#define LOW_FRACTION 0.25 /* a draft with less accepted is "low" */
#define LOW_STREAK 5      /* this many low drafts in a row clear the table */
#define FULL_FRACTION 0.25 /* a request beginning over this occupancy clears it */

struct sp_ngram_mod {
    int32_t n, n_min, n_max;
    int32_t *slot; /* [SLOTS]: the token after an n-gram of this hash, EMPTY if none */
    int64_t used;  /* slots not EMPTY */
    int64_t i_last; /* n-grams starting below this are in the table */
    int64_t n_draft_last; /* length of the last draft (before the caller's cap) */
    int n_low;
    int32_t *buf; /* [n + n_max] */
};

static void clear(sp_ngram_mod *md) {
    for (int64_t i = 0; i < SLOTS; i++) md->slot[i] = EMPTY;
    md->used = 0;
}

static int64_t slot_of(const sp_ngram_mod *md, const int32_t *t) {
    uint64_t r = 0;
    for (int32_t i = 0; i < md->n; i++) r = r * 6364136223846793005ull + (uint64_t)(int64_t)t[i];
    return (int64_t)(r % (uint64_t)SLOTS);
}

/* t[0..n) is followed by t[n] */
static void add(sp_ngram_mod *md, const int32_t *t) {
    int32_t *s = &md->slot[slot_of(md, t)];
    if (*s == EMPTY) md->used++;
    *s = t[md->n];
}

sp_status sp_ngram_mod_new(int32_t n_match, int32_t n_min, int32_t n_max, sp_ngram_mod **out,
                           sp_error *err) {
    *out = NULL;
    if (n_match < 1 || n_match > 1024 || n_min < 0 || n_max < n_min || n_max > 1024 || n_max < 1)
        return sp_fail(err, SP_ERR_ARG,
                       "ngram-mod: need 1 <= n_match <= 1024 and 0 <= n_min <= n_max <= 1024, "
                       "n_max >= 1 (got %d, %d, %d)",
                       n_match, n_min, n_max);
    sp_ngram_mod *md = calloc(1, sizeof *md);
    if (md) {
        md->slot = malloc((size_t)SLOTS * sizeof *md->slot);
        md->buf = malloc((size_t)(n_match + n_max) * sizeof *md->buf);
    }
    if (!md || !md->slot || !md->buf) {
        if (md) free(md->slot), free(md->buf);
        free(md);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    }
    md->n = n_match;
    md->n_min = n_min;
    md->n_max = n_max;
    clear(md);
    *out = md;
    return SP_OK;
}

void sp_ngram_mod_free(sp_ngram_mod *md) {
    if (!md) return;
    free(md->slot);
    free(md->buf);
    free(md);
}

void sp_ngram_mod_begin(sp_ngram_mod *md, const int32_t *h, int64_t len) {
    md->i_last = 0;
    md->n_draft_last = 0;
    if (len < md->n) return;
    for (int64_t i = 0; i < len - md->n; i++) add(md, h + i);
    md->i_last = len - md->n;
    if ((double)md->used / (double)SLOTS > FULL_FRACTION) clear(md);
}

int32_t sp_ngram_mod_draft(sp_ngram_mod *md, const int32_t *h, int64_t len, int32_t s, int32_t *out,
                           int32_t cap) {
    md->n_draft_last = 0;
    const int64_t n = md->n;
    if (len < n) return 0;
    if (md->i_last + CHUNK < len) {
        for (int64_t i = md->i_last; i < len - n; i++) add(md, h + i);
        md->i_last = len - n;
    }
    int32_t *b = md->buf; /* the key, then the drafted tokens */
    for (int64_t i = 0; i < n - 1; i++) b[i] = h[len - n + 1 + i];
    b[n - 1] = s;
    int32_t k = 0;
    for (; k < md->n_max; k++) {
        const int32_t t = md->slot[slot_of(md, b + k)];
        if (t == EMPTY) {
            if (k < md->n_min) return 0;
            break;
        }
        b[n + k] = t;
    }
    md->n_draft_last = k;
    const int32_t m = k < cap ? k : cap;
    for (int32_t i = 0; i < m; i++) out[i] = b[n + i];
    return m > 0 ? m : 0;
}

void sp_ngram_mod_accept(sp_ngram_mod *md, int32_t n_accepted) {
    if (md->n_draft_last <= 0) return;
    if ((double)n_accepted / (double)md->n_draft_last < LOW_FRACTION) {
        if (++md->n_low >= LOW_STREAK) {
            clear(md);
            md->n_low = 0;
            md->i_last = 0;
        }
    } else {
        md->n_low = 0;
    }
}
