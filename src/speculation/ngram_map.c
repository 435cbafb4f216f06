/* ngram_map: llama.cpp's n-gram map drafters ("ngram-map-k", "ngram-map-k4v");
 * see ngram_map.h for the method and its contract. */
#include "ngram_map.h"

#include <stdlib.h>
#include <string.h>

#define NVALUES 4            /* m-grams kept per key */
#define HASH_SLOTS 262144    /* hash of key n-gram -> its index in the history */
#define COUNT_CAP 16380      /* counters saturate here */
#define LCG 2654435761u      /* multiplier of the n-gram hash */

typedef struct value {
    int64_t idx;   /* start of this m-gram in the history (0: slot unused) */
    uint16_t num;  /* times it followed the key */
    int16_t n_acc; /* accepted at the last draft from it (-1: unused) */
} value;

typedef struct key {
    int64_t idx;      /* start of the key n-gram in the history */
    int64_t stat_idx; /* history scanned for values up to here */
    uint16_t num;     /* hits */
    value v[NVALUES];
} key;

struct sp_ngram_map {
    int32_t n, m, min_hits;
    bool key_only;
    key *keys;
    int64_t n_keys, cap_keys;
    uint32_t *slot;      /* [HASH_SLOTS], 0 = empty */
    uint32_t slot_last;  /* every n-gram start above this is hashed */
    int64_t last_begin;  /* history length at the last begin */
    int64_t last_check;  /* history length at the last begin or draft */
    bool drafted;        /* the last draft call made a draft */
    int64_t draft_key;
    int32_t draft_value;
};

static uint32_t hash_of(const int32_t *t, int32_t n) {
    uint32_t h = 0;
    for (int32_t i = 0; i < n; i++) h = h * LCG + (uint32_t)t[i];
    return h;
}

static bool same(const int32_t *a, const int32_t *b, int32_t n) {
    for (int32_t i = 0; i < n; i++)
        if (a[i] != b[i]) return false;
    return true;
}

sp_status sp_ngram_map_new(int32_t n, int32_t m, bool key_only, int32_t min_hits,
                           sp_ngram_map **out, sp_error *err) {
    *out = NULL;
    if (n < 1 || n > 1024 || m < 1 || m > 1024 || min_hits < 1 || min_hits > COUNT_CAP)
        return sp_fail(err, SP_ERR_ARG,
                       "ngram-map: need 1 <= n, m <= 1024 and 1 <= min_hits <= %d (got %d, %d, %d)",
                       COUNT_CAP, n, m, min_hits);
    sp_ngram_map *mp = calloc(1, sizeof *mp);
    if (mp) mp->slot = calloc(HASH_SLOTS, sizeof *mp->slot);
    if (!mp || !mp->slot) {
        free(mp);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    }
    mp->n = n;
    mp->m = m;
    mp->key_only = key_only;
    mp->min_hits = min_hits;
    *out = mp;
    return SP_OK;
}

void sp_ngram_map_free(sp_ngram_map *mp) {
    if (!mp) return;
    free(mp->keys);
    free(mp->slot);
    free(mp);
}

static void drop_key(sp_ngram_map *mp, int64_t i) {
    memmove(mp->keys + i, mp->keys + i + 1, (size_t)(mp->n_keys - i - 1) * sizeof *mp->keys);
    mp->n_keys--;
}

void sp_ngram_map_begin(sp_ngram_map *mp, const int32_t *h, int64_t len) {
    (void)h;
    /* entries at or past `from` may point at text that changed */
    int64_t from = mp->last_begin;
    if (from > len) from = len > (int64_t)mp->n + mp->m ? len - mp->n - mp->m : 0;
    if (len < mp->last_check) {
        for (int64_t i = 0; i < HASH_SLOTS; i++)
            if (mp->slot[i] != 0 && (int64_t)mp->slot[i] >= from) mp->slot[i] = 0;
        mp->slot_last = from > 0 ? (uint32_t)(from - 1) : 0;
        for (int64_t i = mp->n_keys - 1; i >= 0; i--) {
            key *k = &mp->keys[i];
            if (k->idx >= from) {
                drop_key(mp, i);
                continue;
            }
            if (mp->key_only) continue;
            for (int j = NVALUES - 1; j >= 0; j--) {
                if (k->v[j].idx != 0 && k->v[j].idx >= from) {
                    for (int q = j; q < NVALUES - 1; q++) k->v[q] = k->v[q + 1];
                    k->v[NVALUES - 1].idx = 0; /* its n_acc stays, as upstream */
                    k->v[NVALUES - 1].num = 0;
                }
            }
            if (k->v[0].idx == 0) drop_key(mp, i);
        }
    }
    mp->last_check = len;
    mp->last_begin = len;
}

int32_t sp_ngram_map_draft(sp_ngram_map *mp, const int32_t *h, int64_t len, int32_t s,
                           int32_t *out, int32_t cap) {
    mp->drafted = false;
    mp->draft_key = 0;
    mp->draft_value = 0;
    const int64_t n = mp->n, m = mp->m;
    if (len < 2 * n + m || len >= (int64_t)UINT32_MAX || mp->last_check > len) return 0;
    mp->last_check = len;

    int32_t kt[1024]; /* the key: h[len-n+1..len) then s */
    for (int64_t j = 0; j < n - 1; j++) kt[j] = h[len - n + 1 + j];
    kt[n - 1] = s;

    int64_t match = 0;
    const int64_t top = len - n - m - 1;
    uint32_t at = mp->slot[hash_of(kt, (int32_t)n) % HASH_SLOTS];
    if (at != 0 && (int64_t)at < top && same(h + at, kt, (int32_t)n)) match = at;
    if (match == 0 && mp->last_begin > n + m + 1)
        for (int64_t j = mp->last_begin - n - m - 1; j > (int64_t)mp->slot_last; j--)
            if (same(h + j, kt, (int32_t)n)) {
                match = j;
                break;
            }
    if (match == 0)
        for (int64_t j = top; j > mp->last_begin && j > (int64_t)mp->slot_last; j--)
            if (same(h + j, kt, (int32_t)n)) {
                match = j;
                break;
            }

    /* hash the n-grams not yet hashed, newest first; a slot keeps its first */
    if (mp->last_begin > n + m + 1)
        for (int64_t j = mp->last_begin - n - m - 1; j > (int64_t)mp->slot_last; j--) {
            uint32_t *sl = &mp->slot[hash_of(h + j, (int32_t)n) % HASH_SLOTS];
            if (*sl == 0) *sl = (uint32_t)j;
        }
    for (int64_t j = top; j > mp->last_begin && j > (int64_t)mp->slot_last; j--) {
        uint32_t *sl = &mp->slot[hash_of(h + j, (int32_t)n) % HASH_SLOTS];
        if (*sl == 0) *sl = (uint32_t)j;
    }
    if ((uint32_t)top > mp->slot_last) mp->slot_last = (uint32_t)top;

    if (match == 0) return 0;

    int64_t ki = 0;
    while (ki < mp->n_keys && !same(h + mp->keys[ki].idx, kt, (int32_t)n)) ki++;
    if (ki == mp->n_keys) {
        if (mp->n_keys == mp->cap_keys) {
            int64_t c = mp->cap_keys ? 2 * mp->cap_keys : 64;
            key *nk = realloc(mp->keys, (size_t)c * sizeof *nk);
            if (!nk) return 0; /* no memory: no draft */
            mp->keys = nk;
            mp->cap_keys = c;
        }
        key *k = &mp->keys[mp->n_keys++];
        memset(k, 0, sizeof *k);
        k->idx = match;
        for (int v = 0; v < NVALUES; v++) k->v[v].n_acc = (int16_t)m;
    }
    key *k = &mp->keys[ki];
    if (k->num < COUNT_CAP) k->num++;

    int32_t use = 0; /* the value whose n_acc bounds the draft */
    if (!mp->key_only) {
        if (k->num < mp->min_hits) return 0;
        for (int64_t i = k->stat_idx; i <= match; i++) {
            if (!same(h + i, kt, (int32_t)n)) continue;
            const int64_t vb = i + n;
            int found = -1;
            for (int v = 0; v < NVALUES; v++) {
                if (k->v[v].idx == 0) { /* a new m-gram after the key */
                    k->v[v].idx = vb;
                    k->v[v].num = 0;
                    k->v[v].n_acc = (int16_t)m;
                    found = v;
                    break;
                }
                if (same(h + vb, h + k->v[v].idx, (int32_t)m)) {
                    found = v;
                    break;
                }
            }
            if (found >= 0 && k->v[found].num < COUNT_CAP) k->v[found].num++;
        }
        k->stat_idx = match;
        uint16_t best = 0;
        for (int v = 0; v < NVALUES; v++)
            if (k->v[v].num > best) {
                best = k->v[v].num;
                use = v;
            }
        uint32_t others = 0;
        for (int v = 0; v < NVALUES; v++)
            if (v != use) others += k->v[v].num;
        if (others > 0 && best < 2 * others) return 0;
    }
    int32_t nd = k->v[use].n_acc < m ? k->v[use].n_acc : (int32_t)m;
    if (nd > cap) nd = cap;
    for (int32_t i = 0; i < nd; i++) out[i] = h[match + n + i];
    mp->drafted = true;
    mp->draft_key = ki;
    mp->draft_value = use;
    return nd > 0 ? nd : 0;
}

void sp_ngram_map_accept(sp_ngram_map *mp, int32_t n_accepted) {
    if (!mp->drafted) return;
    mp->keys[mp->draft_key].v[mp->draft_value].n_acc = (int16_t)n_accepted;
}
