/* draft: drafters (draft model, prompt lookup, layer skip, low-bit copy,
 * EAGLE-3 head, suffix tries in suffix.c), chain and tree drafting, and keeping
 * the draft cache in step with the committed text. See sp_spec.h. */
#include "draft.h"
#include "ngram_map.h"
#include "ngram_mod.h"
#include "eagle3.h"

#include <math.h>
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "sp_generate.h"
#include "gguf.h"
#include "rng.h"
#include "suffix.h"
#include "tokenizer_load.h"
#include "verify.h"
#include "requant.h"
#include "tree.h"

struct sp_drafter {
    sp_drafter_params p;
    sp_drafter_kind kind;
    sp_model *owned_model;   /* lowbit copy */
    sp_ctx *ctx;             /* NULL for ngram and suffix */
    sp_forward_fn fwd;       /* its forwards (sp_drafter_set_forward); NULL: sp_forward */
    void *fwd_ud;
    sp_suffix *sfx;          /* suffix, and with_suffix (arbitration) */
    sp_ngram_map *map;       /* ngram-map-k, ngram-map-k4v */
    sp_ngram_mod *mod;       /* ngram-mod */
    int64_t map_len;         /* history length the map (or mod) last saw */
    /* arbitration (with_suffix): which drafted the last chain (0 none, 1
     * suffix, 2 the other), its length, the other drafter's measured
     * per-token acceptance, seconds per drafted token, the rest of an
     * iteration (EMA), and when the last drafting call ended */
    int used, used_len;
    double arb_acc, arb_tried, arb_tok, arb_other, arb_end;
    int32_t V;               /* the target's vocabulary: rows of logits and q */
    int32_t Vd;              /* the draft model's (differs only by padding) */
    float *logits;           /* [max_batch][V] */
    float *dlogits;          /* [max_batch][Vd] when Vd != V, else NULL */
    float *row;              /* [V] scratch */
    int32_t *tok, *pos;      /* [max_batch] */
    uint8_t *mask;           /* tree level mask */
    int32_t max_batch;
    int32_t tree_cached;     /* tree nodes 1..tree_cached are in the cache */
    int32_t off;             /* history index of draft cache slot 0 (> 0 after a resync) */
    sp_draft_counters cnt;
    /* eagle3: the head's context (slot P: the pair (hist[P+1], g_P), eagle3.h)
     * and the encoded target rows g_P not yet all consumed, for positions
     * [g0, g0 + gn) */
    const sp_eagle3 *head;
    sp_eagle3_ctx *ectx;
    float *g;                /* [g_cap][edim] */
    int32_t g0, gn, g_cap, edim;
    float *pre;              /* [edim] pre-norm output of the last decoded pair */
    float *tpre;             /* [SP_TREE_MAX_NODES][edim] each draft tree node's pre-norm output */
    int32_t *tpos;           /* [max_batch] positions of a tree level */
    /* dynamic trees (dyn_tree): the working set, the q rows of the nodes
     * evaluated ([dq_rows][V]), whether the last tree was one and the
     * draft-cache slot (from the tree's base) of each of its nodes, -1
     * for nodes not evaluated */
    struct dyn_ws *dyn;
    float *dq;
    int32_t dq_rows;
    bool tree_dyn;
    int32_t tslot[SP_TREE_MAX_NODES];
    /* mtp: the target's MTP block (an MTP context, sp_model.h); slot i holds
     * history position moff + i (RoPE position i): the pair (hist[P],
     * h_{P-1}), h the target's normed final state (rows in g, positions
     * [g0, g0 + gn)), zeros before position 0; pre holds the last
     * evaluated slot's h_out */
    sp_ctx *mctx;
    int32_t moff;
    float *hzero;            /* [edim] */
};

/* When the draft cache lags the history by more than DRAFT_RESYNC_GAP
 * tokens (the adaptive controller decoded plainly for a while), it is not
 * caught up token by token, which for a draft model as slow as the target
 * would cost as much as the plain decoding saved: the cache restarts from
 * the last DRAFT_RESYNC_KEEP tokens (RoPE attention depends only on relative
 * positions, so those tokens sit at slots 0.. with the same relations). The
 * draft then conditions on a shorter context; verification keeps the output
 * exact whatever the draft is. Never triggers while speculating (the gap is
 * at most gamma + 1 <= 33). */
#define DRAFT_RESYNC_GAP 64
#define DRAFT_RESYNC_KEEP 32

static const char *const KIND_NAMES[] = {"none",        "model",       "ngram",        "layerskip",
                                         "lowbit",      "eagle3",      "suffix",       "ngram-cache",
                                         "ngram-map-k", "ngram-map-k4v", "ngram-mod",   "mtp"};

const char *sp_drafter_name(sp_drafter_kind k) {
    return (unsigned)k < sizeof KIND_NAMES / sizeof KIND_NAMES[0] ? KIND_NAMES[k] : "unknown";
}

sp_status sp_drafter_parse(const char *name, sp_drafter_kind *out, sp_error *err) {
    for (int i = 0; i < (int)(sizeof KIND_NAMES / sizeof KIND_NAMES[0]); i++)
        if (name && !strcmp(name, KIND_NAMES[i])) {
            *out = (sp_drafter_kind)i;
            return SP_OK;
        }
    return sp_fail(err, SP_ERR_ARG, "unknown drafter '%s' (model, ngram, layerskip, lowbit, eagle3, mtp, suffix, "
                   "ngram-cache, ngram-map-k, ngram-map-k4v, ngram-mod, none)",
                   name ? name : "");
}

int32_t sp_ngram_propose(const int32_t *hist, int32_t len, int32_t n_min, int32_t n_max,
                         int32_t max_pred, int32_t *out) {
    if (n_min < 1) n_min = 1;
    for (int32_t n = n_max < len - 1 ? n_max : len - 1; n >= n_min; n--) {
        const int32_t *key = hist + len - n;
        /* most recent earlier occurrence: scan start positions backwards */
        for (int32_t s = len - n - 1; s >= 0; s--) {
            if (memcmp(hist + s, key, (size_t)n * sizeof *hist)) continue;
            int32_t k = 0;
            while (k < max_pred && s + n + k < len) {
                out[k] = hist[s + n + k];
                k++;
            }
            if (k > 0) return k;
        }
    }
    return 0;
}

sp_status sp_parse_skip_layers(const char *s, int32_t L, bool *skip, sp_error *err) {
    if (skip) memset(skip, 0, (size_t)L * sizeof *skip);
    if (!s || !*s) {
        if (!skip) return SP_OK;
        for (int32_t l = 1; l < L - 1; l += 2) skip[l] = true;
        if (L < 3)
            return sp_fail(err, SP_ERR_ARG, "skip_layers: a %d-layer model has no layer to skip by default", L);
        return SP_OK;
    }
    const long limit = skip ? L : SP_DRAFT_MAX_LAYERS;
    const char *c = s;
    for (;;) {
        char *end;
        if (!isdigit((unsigned char)*c)) goto bad; /* also an empty item or a trailing comma */
        long a = strtol(c, &end, 10), b;
        if (a >= limit) goto range;
        b = a;
        c = end;
        if (*c == '-') {
            if (!isdigit((unsigned char)c[1])) goto bad;
            b = strtol(c + 1, &end, 10);
            if (b < a) goto bad;
            if (b >= limit) goto range;
            c = end;
        }
        for (long l = a; skip && l <= b; l++) skip[l] = true;
        if (*c == '\0') break;
        if (*c != ',') goto bad;
        c++;
    }
    for (int32_t l = 0; skip && l < L; l++)
        if (!skip[l]) return SP_OK;
    if (!skip) return SP_OK;
    return sp_fail(err, SP_ERR_ARG, "skip_layers: '%s' skips every layer", s);
bad:
    return sp_fail(err, SP_ERR_ARG, "skip_layers: '%s' is not a layer list like '1,3,5-7'", s);
range:
    return sp_fail(err, SP_ERR_ARG, "skip_layers: '%s' names a layer outside [0, %ld)", s, limit);
}

sp_drafter_params sp_drafter_default_params(void) {
    sp_drafter_params p = {.kind = SP_DRAFT_NONE, .ngram_min = 1, .ngram_max = 4,
                           .map_n = 12, .map_m = 48, .map_min_hits = 1,
                           .mod_n_match = 24, .mod_n_min = 48, .mod_n_max = 64,
                           .lowbit_type = SP_GGML_Q4_0, .max_batch = SP_DRAFT_DEFAULT_BATCH};
    return p;
}

void sp_drafter_free(sp_drafter *d) {
    if (!d) return;
    sp_eagle3_ctx_free(d->ectx);
    sp_ctx_free(d->mctx);
    free(d->dyn);
    free(d->dq);
    free(d->hzero);
    free(d->g);
    free(d->pre);
    free(d->tpre);
    free(d->tpos);
    sp_ctx_free(d->ctx);
    sp_suffix_free(d->sfx);
    sp_ngram_map_free(d->map);
    sp_ngram_mod_free(d->mod);
    sp_model_free(d->owned_model);
    free(d->logits);
    free(d->dlogits);
    free(d->row);
    free(d->tok);
    free(d->pos);
    free(d->mask);
    free(d);
}

sp_drafter_kind sp_drafter_kind_of(const sp_drafter *d) { return d->kind; }
sp_ctx *sp_drafter_ctx(sp_drafter *d) { return d->ctx; }
sp_suffix *sp_drafter_suffix(sp_drafter *d) { return d->sfx; }

sp_status sp_drafter_reset(sp_drafter *d, sp_error *err) { return sp_drafter_reset_keep(d, 0, err); }

sp_status sp_drafter_reset_keep(sp_drafter *d, int32_t n_keep, sp_error *err) {
    /* the draft cache is a prefix of the history only from slot 0 and
     * without tree nodes; then its first n_keep tokens may stay */
    if (!d->ctx || d->ectx || d->off != 0 || d->tree_cached != 0) n_keep = 0;
    if (d->ctx && n_keep > sp_ctx_n_past(d->ctx)) n_keep = sp_ctx_n_past(d->ctx);
    d->off = 0;
    d->tree_cached = 0;
    d->used = 0;
    if (d->sfx) { /* its output joins the corpus */
        sp_status st = sp_suffix_end_request(d->sfx, err);
        if (st) return st;
    }
    d->g0 = d->gn = 0;
    d->moff = 0;
    if (d->mctx) return sp_ctx_truncate(d->mctx, 0, err);
    if (d->ectx) return sp_eagle3_ctx_truncate(d->ectx, 0, err);
    if (!d->ctx) return SP_OK;
    if (n_keep > 0 && !sp_ctx_truncate(d->ctx, n_keep, NULL)) return SP_OK;
    return sp_ctx_truncate(d->ctx, 0, err); /* (a recurrent draft that cannot go back there) */
}
sp_status sp_drafter_keep(sp_drafter *d, int32_t n, sp_error *err) {
    if (!d->ctx || d->ectx || n >= sp_ctx_n_past(d->ctx)) return SP_OK;
    if (n > 0 && !sp_ctx_truncate(d->ctx, n, NULL)) return SP_OK;
    return sp_ctx_truncate(d->ctx, 0, err);
}

const sp_draft_counters *sp_drafter_counters(const sp_drafter *d) { return &d->cnt; }

sp_status sp_drafter_set_head(sp_drafter *d, const sp_eagle3 *h, sp_error *err) {
    if (!d->ectx) return sp_fail(err, SP_ERR_ARG, "drafter: only the eagle3 drafter takes a new head");
    sp_status st = sp_eagle3_ctx_set_head(d->ectx, h, err);
    if (!st) d->head = d->p.eagle3 = h;
    return st;
}

void sp_drafter_set_forward(sp_drafter *d, sp_forward_fn fn, void *ud) {
    if (d->kind != SP_DRAFT_MODEL) return;
    d->fwd = fn;
    d->fwd_ud = ud;
}

/* Same vocabulary: the same pieces on every id both models have, and the
 * ids only one of them has are its padding ("[PAD<i>]"), which samplers
 * never pick (sp_model_n_valid_vocab), so the draft proposes and the target
 * accepts over the same real tokens. Without tokenizers: the same size. */
static sp_status check_vocab(const sp_model *t, const sp_model *d, sp_error *err) {
    int32_t vt = sp_model_cfg(t)->n_vocab, vd = sp_model_cfg(d)->n_vocab;
    const sp_tokenizer *a = sp_model_tokenizer(t), *b = sp_model_tokenizer(d);
    if (!a || !b) {
        if (vt != vd)
            return sp_fail(err, SP_ERR_ARG,
                           "drafter: the draft model's vocabulary (%d tokens) differs from the "
                           "target's (%d tokens)",
                           vd, vt);
        return SP_OK;
    }
    const int32_t common = vt < vd ? vt : vd;
    for (int32_t i = 0; i < common; i++) {
        sp_str x = sp_tokenizer_token_text(a, i), y = sp_tokenizer_token_text(b, i);
        if (x.len != y.len || memcmp(x.ptr, y.ptr, x.len))
            return sp_fail(err, SP_ERR_ARG,
                           "drafter: the draft model's vocabulary differs from the target's at "
                           "token %d ('%.*s' vs '%.*s')",
                           i, (int)(y.len > 40 ? 40 : y.len), y.ptr, (int)(x.len > 40 ? 40 : x.len),
                           x.ptr);
    }
    const sp_tokenizer *big = vt > vd ? a : b;
    for (int32_t i = common; i < (vt > vd ? vt : vd); i++)
        if (!sp_tokenizer_is_padding(big, i))
            return sp_fail(err, SP_ERR_ARG,
                           "drafter: the %s model's vocabulary has %d tokens, the %s's %d, and its "
                           "token %d is not padding",
                           vt > vd ? "target" : "draft", vt > vd ? vt : vd,
                           vt > vd ? "draft" : "target", common, i);
    return SP_OK;
}

sp_status sp_drafter_params_check(const sp_drafter_params *p, const sp_model *target,
                                  sp_error *err) {
    const int32_t L = sp_model_cfg(target)->n_layers;
    switch (p->kind) {
    case SP_DRAFT_NONE:
    case SP_DRAFT_SUFFIX: return SP_OK;
    case SP_DRAFT_MODEL:
        if (!p->draft_model)
            return sp_fail(err, SP_ERR_ARG, "drafter: 'model' needs a draft model, and none was given");
        return check_vocab(target, p->draft_model, err);
    case SP_DRAFT_LOWBIT:
        if (!sp_model_requantize_supported(p->lowbit_type))
            return sp_fail(err, SP_ERR_ARG, "lowbit: Specula does not compute with %s weights",
                           sp_ggml_type_name(p->lowbit_type));
        return p->lowbit_model ? check_vocab(target, p->lowbit_model, err) : SP_OK;
    case SP_DRAFT_LAYERSKIP: {
        if (L > SP_DRAFT_MAX_LAYERS)
            return sp_fail(err, SP_ERR_UNSUPPORTED, "skip_layers: the target has %d layers, more than %d",
                           L, SP_DRAFT_MAX_LAYERS);
        bool skip[SP_DRAFT_MAX_LAYERS];
        return sp_parse_skip_layers(p->skip_layers, L, skip, err);
    }
    case SP_DRAFT_EAGLE3: {
        if (!p->eagle3)
            return sp_fail(err, SP_ERR_ARG, "drafter: 'eagle3' needs an EAGLE-3 head, and none was given");
        if (sp_eagle3_target(p->eagle3) != target)
            return sp_fail(err, SP_ERR_ARG, "drafter: the EAGLE-3 head was loaded for another target");
        return SP_OK;
    }
    case SP_DRAFT_MTP:
        if (sp_model_n_mtp(target) < 1)
            return sp_fail(err, SP_ERR_ARG, "drafter: 'mtp' needs a model with MTP (nextn) layers, and this one "
                           "has none");
        return SP_OK;
    case SP_DRAFT_NGRAM_MAP_K:
    case SP_DRAFT_NGRAM_MAP_K4V:
        if (p->map_n < 1 || p->map_n > 1024 || p->map_m < 1 || p->map_m > 1024 ||
            p->map_min_hits < 1 || p->map_min_hits > 1024)
            return sp_fail(err, SP_ERR_ARG,
                           "map_n, map_m, map_min_hits: ngram-map needs each in [1, 1024] (got %d, %d, %d)",
                           p->map_n, p->map_m, p->map_min_hits);
        return SP_OK;
    case SP_DRAFT_NGRAM_MOD:
        if (p->mod_n_match < 1 || p->mod_n_match > 1024 || p->mod_n_min < 0 || p->mod_n_max < 1 ||
            p->mod_n_min > p->mod_n_max || p->mod_n_max > 1024)
            return sp_fail(err, SP_ERR_ARG,
                           "mod_n_match, mod_n_min, mod_n_max: ngram-mod needs 1 <= mod_n_match <= 1024 "
                           "and 0 <= mod_n_min <= mod_n_max <= 1024 (got %d, %d, %d)",
                           p->mod_n_match, p->mod_n_min, p->mod_n_max);
        return SP_OK;
    case SP_DRAFT_NGRAM_CACHE:
        if (p->ngram_min < 1 || p->ngram_max < p->ngram_min || p->ngram_max > 4)
            return sp_fail(err, SP_ERR_ARG,
                           "ngram_min, ngram_max: ngram-cache needs 1 <= ngram_min <= ngram_max <= 4 "
                           "(got %d, %d)",
                           p->ngram_min, p->ngram_max);
        return SP_OK;
    case SP_DRAFT_NGRAM:
        if (p->ngram_min < 1 || p->ngram_max < p->ngram_min || p->ngram_max > SP_NGRAM_MAX)
            return sp_fail(err, SP_ERR_ARG,
                           "ngram_min, ngram_max: need 1 <= ngram_min <= ngram_max <= %d (got %d, %d)",
                           SP_NGRAM_MAX, p->ngram_min, p->ngram_max);
        return SP_OK;
    }
    return sp_fail(err, SP_ERR_ARG, "drafter: unknown kind %d", (int)p->kind);
}

sp_status sp_drafter_init(const sp_drafter_params *p, sp_ctx *target, sp_drafter **out,
                          sp_error *err) {
    *out = NULL;
    if (p->kind == SP_DRAFT_NONE) return sp_fail(err, SP_ERR_ARG, "drafter: none given");
    const sp_model *tm = sp_ctx_model(target);
    sp_status st = sp_drafter_params_check(p, tm, err);
    if (st) return st;
    sp_drafter *d = calloc(1, sizeof *d);
    if (!d) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    d->p = *p;
    d->kind = p->kind;
    d->V = sp_model_cfg(tm)->n_vocab;
    d->max_batch = p->max_batch > 0 ? p->max_batch : SP_DRAFT_DEFAULT_BATCH;
    const sp_model *dm = NULL;
    bool skip_buf[SP_DRAFT_MAX_LAYERS];
    switch (p->kind) {
    case SP_DRAFT_MODEL: dm = p->draft_model; break;
    case SP_DRAFT_LOWBIT:
        if (p->lowbit_model) {
            dm = p->lowbit_model;
        } else {
            st = sp_model_requantize(tm, p->lowbit_type, &d->owned_model, err);
            dm = d->owned_model;
        }
        break;
    case SP_DRAFT_LAYERSKIP:
        st = sp_parse_skip_layers(p->skip_layers, sp_model_cfg(tm)->n_layers, skip_buf, err);
        dm = tm;
        break;
    default: break;
    }
    if (!st && (p->kind == SP_DRAFT_SUFFIX || p->kind == SP_DRAFT_NGRAM_CACHE || p->with_suffix)) {
        /* ngram-cache keeps its own corpus of whole requests (llama.cpp's
         * dynamic cache), apart from the suffix drafters' outputs */
        st = sp_suffix_init(p->kind == SP_DRAFT_NGRAM_CACHE ? NULL : p->suffix_corpus,
                            sp_ctx_n_ctx(target) < SP_SUFFIX_REQUEST_TOKENS ? sp_ctx_n_ctx(target)
                                                                            : SP_SUFFIX_REQUEST_TOKENS,
                            &d->sfx, err);
        if (!st) sp_suffix_set_whole_text(d->sfx, p->kind == SP_DRAFT_NGRAM_CACHE);
    }
    if (!st && (p->kind == SP_DRAFT_NGRAM_MAP_K || p->kind == SP_DRAFT_NGRAM_MAP_K4V))
        st = sp_ngram_map_new(p->map_n, p->map_m, p->kind == SP_DRAFT_NGRAM_MAP_K, p->map_min_hits,
                              &d->map, err);
    if (!st && p->kind == SP_DRAFT_NGRAM_MOD)
        st = sp_ngram_mod_new(p->mod_n_match, p->mod_n_min, p->mod_n_max, &d->mod, err);
    if (!st && dm) {
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = sp_ctx_n_ctx(target);
        cp.max_batch = d->max_batch;
        cp.pool = sp_ctx_pool(target);
        /* the target's cache types; F16 where a draft's heads cannot be Q8_0 */
        cp.type_k = sp_ctx_type_k(target);
        cp.type_v = sp_ctx_type_v(target);
        if (sp_model_cfg(dm)->head_dim % 32) {
            if (cp.type_k == SP_GGML_Q8_0) cp.type_k = SP_GGML_F16;
            if (cp.type_v == SP_GGML_Q8_0) cp.type_v = SP_GGML_F16;
        }
        d->Vd = sp_model_cfg(dm)->n_vocab;
        st = sp_ctx_init(dm, &cp, &d->ctx, err);
        if (!st && p->kind == SP_DRAFT_LAYERSKIP) st = sp_ctx_set_skip_layers(d->ctx, skip_buf, err);
    }
    if (!st && p->kind == SP_DRAFT_EAGLE3) {
        /* the head reads the taps of every target row; its batch takes a
         * whole target forward */
        const int32_t tb = sp_ctx_max_batch(target);
        d->head = p->eagle3;
        d->edim = sp_eagle3_dim(d->head);
        d->g_cap = tb + 2;
        st = sp_ctx_set_taps(target, sp_eagle3_target_layers(d->head), 3, err);
        if (!st)
            st = sp_eagle3_ctx_init(d->head, sp_ctx_n_ctx(target), tb > d->max_batch ? tb : d->max_batch,
                                    sp_ctx_pool(target), &d->ectx, err);
        if (!st) {
            d->g = malloc((size_t)d->g_cap * (size_t)d->edim * sizeof(float));
            d->pre = malloc((size_t)d->edim * sizeof(float));
            d->tpre = malloc((size_t)SP_TREE_MAX_NODES * (size_t)d->edim * sizeof(float));
            d->tpos = malloc((size_t)d->max_batch * sizeof *d->tpos);
            if (!d->g || !d->pre || !d->tpre || !d->tpos) st = sp_fail(err, SP_ERR_NOMEM, "out of memory for the head's rows");
        }
    }
    if (!st && p->kind == SP_DRAFT_MTP) {
        /* the block reads the target's normed final state of every target
         * row (taps of layer n_layers); its batch takes a whole target forward */
        const int32_t tb = sp_ctx_max_batch(target), L = sp_model_cfg(tm)->n_layers;
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = sp_ctx_n_ctx(target);
        cp.max_batch = tb > d->max_batch ? tb : d->max_batch;
        cp.pool = sp_ctx_pool(target);
        cp.type_k = sp_ctx_type_k(target);
        cp.type_v = sp_ctx_type_v(target);
        cp.mtp = true;
        d->edim = sp_model_cfg(tm)->dim;
        d->g_cap = tb + 2;
        st = sp_ctx_set_taps(target, &L, 1, err);
        if (!st) st = sp_ctx_init(tm, &cp, &d->mctx, err);
        if (!st) {
            d->g = malloc((size_t)d->g_cap * (size_t)d->edim * sizeof(float));
            d->pre = malloc((size_t)d->edim * sizeof(float));
            d->hzero = calloc((size_t)d->edim, sizeof(float));
            d->tpre = malloc((size_t)SP_TREE_MAX_NODES * (size_t)d->edim * sizeof(float));
            d->tpos = malloc((size_t)d->max_batch * sizeof *d->tpos);
            if (!d->g || !d->pre || !d->hzero || !d->tpre || !d->tpos) st = sp_fail(err, SP_ERR_NOMEM, "out of memory for the MTP rows");
        }
    }
    if (!st) {
        size_t B = (size_t)d->max_batch;
        d->logits = malloc(B * (size_t)d->V * sizeof(float));
        if (dm && d->Vd != d->V) d->dlogits = malloc(B * (size_t)d->Vd * sizeof(float));
        d->row = malloc((size_t)d->V * sizeof(float));
        d->tok = malloc(B * sizeof(int32_t));
        d->pos = malloc(B * sizeof(int32_t));
        d->mask = malloc(B * (B + SP_TREE_MAX_NODES) * sizeof(uint8_t));
        if (!d->logits || !d->row || !d->tok || !d->pos || !d->mask || (dm && d->Vd != d->V && !d->dlogits))
            st = sp_fail(err, SP_ERR_NOMEM, "out of memory for drafter buffers");
    }
    if (st) {
        sp_drafter_free(d);
        return st;
    }
    *out = d;
    return SP_OK;
}

/* Rows of the draft model's logits (Vd wide, in d->dlogits) into the
 * target-wide rows of out. The ids one side lacks are padding, which the
 * sampler never reads (its valid ids are the target's, all below both
 * sizes): they are set to 0 only to keep the rows defined. */
static void widen_rows(sp_drafter *d, int32_t rows, float *out) {
    const int32_t c = d->Vd < d->V ? d->Vd : d->V;
    for (int32_t r = 0; r < rows; r++) {
        float *o = out + (int64_t)r * d->V;
        memcpy(o, d->dlogits + (int64_t)r * d->Vd, (size_t)c * sizeof(float));
        if (c < d->V) memset(o + c, 0, (size_t)(d->V - c) * sizeof(float));
    }
}

static sp_status dforward(sp_drafter *d, const sp_batch *b, float *logits, sp_error *err) {
    double t0 = sp_now();
    float *out = d->dlogits ? d->dlogits : logits;
    double cost = -1;
    sp_status st = d->fwd ? d->fwd(d->fwd_ud, d->ctx, b, out, &cost, err) : sp_forward(d->ctx, b, out, err);
    if (!st && d->dlogits) widen_rows(d, b->logits_all ? b->n : 1, logits);
    d->cnt.seconds += sp_now() - t0;
    d->cnt.forwards++;
    return st;
}

/* Evaluate the committed tokens the draft cache lacks; last row's logits
 * go to d->logits. The cache never lacks nothing: its last committed token
 * is always left out after accept, so at least one token is fed. */
static sp_status catch_up(sp_drafter *d, const int32_t *hist, int32_t n, sp_error *err) {
    int32_t have = d->off + sp_ctx_n_past(d->ctx); /* history tokens in the cache */
    if (n - have > DRAFT_RESYNC_GAP) {
        sp_status st = sp_ctx_truncate(d->ctx, 0, err);
        if (st) return st;
        d->off = have = n - DRAFT_RESYNC_KEEP;
    }
    if (have >= n) {
        if (n - 1 < d->off) { /* cannot happen: the cache never runs ahead of a resync */
            d->off = 0;
            sp_status st = sp_ctx_truncate(d->ctx, 0, err);
            if (st) return st;
            have = 0;
        } else {
            sp_status st = sp_ctx_truncate(d->ctx, n - 1 - d->off, err);
            if (st) return st;
            have = n - 1;
        }
    }
    while (have < n) {
        int32_t m = n - have < d->max_batch ? n - have : d->max_batch;
        sp_batch b = {.tokens = hist + have, .n = m};
        const double t0 = d->cnt.seconds;
        sp_status st = dforward(d, &b, d->logits, err);
        if (st) return st;
        if (m > 2) {
            d->cnt.gap_forwards++;
            d->cnt.gap_seconds += d->cnt.seconds - t0;
        }
        have += m;
    }
    return SP_OK;
}

static float row_max(const float *x, int32_t n) {
    float m = x[0];
    for (int32_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
}

/* ---------------------------------------------------------------- eagle3 */

/* Drop the encoded rows the head's cache no longer needs: those of the
 * pairs it holds, but one (the last pair is evaluated again when a draft
 * starts from it, as after a prompt). */
static void e3_drop_consumed(sp_drafter *d) {
    const int32_t keep_from = sp_eagle3_ctx_n_past(d->ectx) - 1;
    const int32_t drop = keep_from - d->g0;
    if (drop <= 0) return;
    if (drop >= d->gn) {
        d->g0 += d->gn;
        d->gn = 0;
        return;
    }
    memmove(d->g, d->g + (size_t)drop * (size_t)d->edim, (size_t)(d->gn - drop) * (size_t)d->edim * sizeof(float));
    d->g0 += drop;
    d->gn -= drop;
}

/* Evaluate the pairs P = n_past.. up to `last` (inclusive): (hist[P+1],
 * g_P). The last row's logits go to d->logits, its pre-norm output to
 * d->pre. The rows must be there. */
static sp_status e3_pairs(sp_drafter *d, const int32_t *hist, int32_t last, sp_error *err) {
    int32_t P = sp_eagle3_ctx_n_past(d->ectx);
    if (P > last) return SP_OK;
    if (P < d->g0 || last >= d->g0 + d->gn)
        return sp_fail(err, SP_ERR_STATE,
                       "eagle3: the target's hidden states of positions %d..%d are missing (have %d..%d)", P,
                       last, d->g0, d->g0 + d->gn - 1);
    const double t0 = sp_now();
    sp_status st = SP_OK;
    while (!st && P <= last) {
        const int32_t m = last - P + 1 < d->max_batch ? last - P + 1 : d->max_batch;
        st = sp_eagle3_decode(d->ectx, hist + P + 1, d->g + (size_t)(P - d->g0) * (size_t)d->edim, m, false,
                              d->logits, d->pre, err);
        d->cnt.forwards++;
        P += m;
    }
    d->cnt.seconds += sp_now() - t0;
    return st;
}

static sp_status mtp_target_rows(sp_drafter *d, sp_ctx *target, const int32_t *hist, int32_t n_known,
                                 int32_t p0, int32_t B, sp_error *err);

sp_status sp_drafter_target_rows(sp_drafter *d, sp_ctx *target, const int32_t *hist, int32_t n_known,
                                 int32_t p0, int32_t B, sp_error *err) {
    if (d->mctx) return mtp_target_rows(d, target, hist, n_known, p0, B, err);
    if (!d->ectx) return SP_OK;
    /* rows at p0 and later are replaced (a rejected draft's), and so are
     * the pairs that used them */
    if (d->g0 + d->gn > p0) d->gn = p0 > d->g0 ? p0 - d->g0 : 0;
    if (d->gn == 0) d->g0 = p0;
    sp_status st = SP_OK;
    if (sp_eagle3_ctx_n_past(d->ectx) > p0) st = sp_eagle3_ctx_truncate(d->ectx, p0, err);
    /* the pairs whose next token is known and not the last one (the draft
     * starts from that) */
    if (!st) st = e3_pairs(d, hist, (n_known - 2 < p0 - 1 ? n_known - 2 : p0 - 1) - 1, err);
    if (st) return st;
    e3_drop_consumed(d);
    if (d->g0 + d->gn != p0) { /* a gap (rows the drafter did not see): start afresh from here */
        if ((st = sp_eagle3_ctx_truncate(d->ectx, 0, err))) return st;
        d->g0 = p0;
        d->gn = 0;
    }
    if (d->gn + B > d->g_cap)
        return sp_fail(err, SP_ERR_STATE, "eagle3: %d target rows pending, room for %d", d->gn + B, d->g_cap);
    const double t0 = sp_now();
    const float *taps[3];
    for (int i = 0; i < 3; i++) {
        int32_t rows;
        taps[i] = sp_ctx_taps(target, i, &rows);
        if (!taps[i] || rows != B || sp_ctx_n_taps(target) != 3)
            return sp_fail(err, SP_ERR_STATE, "eagle3: the target's forward recorded no taps for its %d rows", B);
    }
    const int32_t mb = d->max_batch, td = sp_eagle3_target_dim(d->head);
    for (int32_t r = 0; !st && r < B; r += mb) {
        const int32_t m = B - r < mb ? B - r : mb;
        const float *part[3] = {taps[0] + (size_t)r * td, taps[1] + (size_t)r * td, taps[2] + (size_t)r * td};
        st = sp_eagle3_encode(d->ectx, part, m, d->g + (size_t)(d->gn + r) * (size_t)d->edim, err);
    }
    if (!st) d->gn += B;
    d->cnt.seconds += sp_now() - t0;
    return st;
}

/* A chain from the head: the pairs up to P = n-2 (its token hist[n-1], the
 * last committed one), then one pair per drafted token, fed its
 * predecessor's pre-norm output as g. The drafted pairs are dropped after:
 * the target's rows replace them. */
static sp_status e3_chain(sp_drafter *d, const int32_t *hist, int32_t n, int32_t gamma, int32_t n_min,
                          float p_min, sp_sampler *smp, sp_rng *rng, int32_t *draft, float *q, int32_t *n_draft,
                          sp_error *err) {
    const int32_t V = d->V;
    sp_status st = SP_OK;
    if (n < 2) return SP_OK; /* no target row yet: nothing to draft from */
    if (sp_eagle3_ctx_n_past(d->ectx) > n - 2) st = sp_eagle3_ctx_truncate(d->ectx, n - 2, err);
    if (!st) st = e3_pairs(d, hist, n - 2, err);
    if (st) return st;
    e3_drop_consumed(d);
    for (int32_t i = 0; i < gamma; i++) {
        float *qi = q + (int64_t)i * V;
        sp_sampler_probs(smp, d->logits, qi);
        if (i >= n_min && p_min > 0 && row_max(qi, V) < p_min) break;
        draft[i] = sp_sample_from_probs(qi, V, sp_rng_uniform(rng));
        *n_draft = i + 1;
        if (i + 1 < gamma) {
            const double t0 = sp_now();
            st = sp_eagle3_decode(d->ectx, &draft[i], d->pre, 1, false, d->logits, d->pre, err);
            d->cnt.seconds += sp_now() - t0;
            d->cnt.forwards++;
            if (st) return st;
        }
    }
    return sp_eagle3_ctx_truncate(d->ectx, n - 1, err);
}

/* ------------------------------------------------------------------- mtp */

/* History position of the MTP cache's next slot. */
static int32_t mtp_next(const sp_drafter *d) { return d->moff + sp_ctx_n_past(d->mctx); }

static sp_status mtp_truncate(sp_drafter *d, int32_t pos, sp_error *err) {
    if (mtp_next(d) <= pos) return SP_OK;
    return sp_ctx_truncate(d->mctx, pos > d->moff ? pos - d->moff : 0, err);
}

/* Drop the target rows the MTP cache no longer needs: those of the slots
 * it holds, but the last one's (a draft re-evaluates its last slot). */
static void mtp_drop_consumed(sp_drafter *d) {
    const int32_t drop = mtp_next(d) - 2 - d->g0;
    if (drop <= 0) return;
    if (drop >= d->gn) {
        d->g0 += d->gn;
        d->gn = 0;
        return;
    }
    memmove(d->g, d->g + (size_t)drop * (size_t)d->edim, (size_t)(d->gn - drop) * (size_t)d->edim * sizeof(float));
    d->g0 += drop;
    d->gn -= drop;
}

/* One MTP forward of m slots from the next one (tokens, h rows). The last
 * row's logits go to d->logits, its h_out to d->pre. */
static sp_status mtp_forward(sp_drafter *d, const int32_t *tokens, const float *h, int32_t m, sp_error *err) {
    const double t0 = sp_now();
    sp_batch b = {.tokens = tokens, .n = m};
    sp_status st = sp_forward_mtp(d->mctx, &b, h, d->logits, d->pre, err);
    d->cnt.seconds += sp_now() - t0;
    d->cnt.forwards++;
    return st;
}

/* Evaluate the slots of positions mtp_next(d) .. last (inclusive): the
 * pairs (hist[P], h_{P-1}). The target rows must be there. */
static sp_status mtp_slots(sp_drafter *d, const int32_t *hist, int32_t last, sp_error *err) {
    int32_t P = mtp_next(d);
    sp_status st = SP_OK;
    if (P == 0 && last >= 0) { /* the first token pairs with zeros, as llama.cpp's */
        if ((st = mtp_forward(d, hist, d->hzero, 1, err))) return st;
        P = 1;
    }
    if (P > last) return SP_OK;
    if (P - 1 < d->g0 || last - 1 >= d->g0 + d->gn)
        return sp_fail(err, SP_ERR_STATE, "mtp: the target's hidden states of positions %d..%d are missing (have %d..%d)",
                       P - 1, last - 1, d->g0, d->g0 + d->gn - 1);
    const int32_t mb = sp_ctx_max_batch(d->mctx);
    while (!st && P <= last) {
        const int32_t m = last - P + 1 < mb ? last - P + 1 : mb;
        st = mtp_forward(d, hist + P, d->g + (size_t)(P - 1 - d->g0) * (size_t)d->edim, m, err);
        P += m;
    }
    return st;
}

static sp_status mtp_target_rows(sp_drafter *d, sp_ctx *target, const int32_t *hist, int32_t n_known,
                                 int32_t p0, int32_t B, sp_error *err) {
    /* rows at p0 and later are replaced (a rejected draft's), and so are
     * the slots that used them (positions after p0) */
    if (d->g0 + d->gn > p0) d->gn = p0 > d->g0 ? p0 - d->g0 : 0;
    if (d->gn == 0) d->g0 = p0;
    sp_status st = mtp_truncate(d, p0 + 1, err);
    /* the slots whose token is known and not the last one (a draft starts
     * from that) and whose row is here */
    const int32_t last = n_known - 2 < p0 ? n_known - 2 : p0;
    if (!st && (mtp_next(d) == 0 || mtp_next(d) - 1 >= d->g0)) st = mtp_slots(d, hist, last, err);
    if (st) return st;
    mtp_drop_consumed(d);
    if (mtp_next(d) > 0 && mtp_next(d) - 1 < d->g0) {
        /* a gap (rows the drafter did not see: plain steps): the cache
         * restarts at the first slot the new rows serve */
        if ((st = sp_ctx_truncate(d->mctx, 0, err))) return st;
        d->moff = p0 + 1;
        d->g0 = p0;
        d->gn = 0;
    }
    if (d->gn + B > d->g_cap)
        return sp_fail(err, SP_ERR_STATE, "mtp: %d target rows pending, room for %d", d->gn + B, d->g_cap);
    int32_t rows;
    const float *x = sp_ctx_taps(target, 0, &rows);
    if (!x || rows != B || sp_ctx_n_taps(target) != 1)
        return sp_fail(err, SP_ERR_STATE, "mtp: the target's forward recorded no final states for its %d rows", B);
    sp_model_final_norm(sp_ctx_model(target), x, B, d->g + (size_t)d->gn * (size_t)d->edim);
    d->gn += B;
    return SP_OK;
}

sp_status sp_drafter_replace_row(sp_drafter *d, int32_t pos, const float *h, sp_error *err) {
    if (!d->mctx) return sp_fail(err, SP_ERR_ARG, "drafter: only 'mtp' takes a replaced target row");
    if (pos < d->g0 || pos >= d->g0 + d->gn)
        return sp_fail(err, SP_ERR_RANGE, "mtp: the row of position %d is not held (rows %d..%d)", pos, d->g0,
                       d->g0 + d->gn - 1);
    memcpy(d->g + (size_t)(pos - d->g0) * (size_t)d->edim, h, (size_t)d->edim * sizeof(float));
    return mtp_truncate(d, pos + 1, err);
}

/* A chain from the MTP block: the slots up to position n-1 (its token
 * hist[n-1], the last committed one, paired with h_{n-2}), then one slot
 * per drafted token at the next position, paired with its predecessor's
 * h_out (llama.cpp's draft-mtp). The drafted slots are dropped after: the
 * target's rows replace them. */
static sp_status mtp_chain(sp_drafter *d, const int32_t *hist, int32_t n, int32_t gamma, int32_t n_min,
                           float p_min, sp_sampler *smp, sp_rng *rng, int32_t *draft, float *q, int32_t *n_draft,
                           sp_error *err) {
    const int32_t V = d->V;
    if (n < 2 || n - 1 < d->moff) return SP_OK; /* no target row yet: nothing to draft from */
    sp_status st = mtp_truncate(d, n - 1, err);
    if (!st) st = mtp_slots(d, hist, n - 1, err);
    if (st) return st;
    mtp_drop_consumed(d);
    for (int32_t i = 0; i < gamma; i++) {
        float *qi = q + (int64_t)i * V;
        sp_sampler_probs(smp, d->logits, qi);
        if (i >= n_min && p_min > 0 && row_max(qi, V) < p_min) break;
        draft[i] = sp_sample_from_probs(qi, V, sp_rng_uniform(rng));
        *n_draft = i + 1;
        if (i + 1 < gamma && (st = mtp_forward(d, &draft[i], d->pre, 1, err))) return st;
    }
    return mtp_truncate(d, n, err);
}

sp_status sp_drafter_prefill(sp_drafter *d, const int32_t *hist, int32_t n, sp_error *err) {
    /* arbitrated: the draft cache is filled when the drafter is first chosen
     * (catch_up; a long gap restarts it from the last DRAFT_RESYNC_KEEP
     * tokens), so a request the suffix drafter serves alone never pays the
     * draft model's prefill */
    if (d->map || d->mod) { /* a request begins: hist[0..n) is its prompt but the last token */
        if (d->map) sp_ngram_map_begin(d->map, hist, n);
        if (d->mod) sp_ngram_mod_begin(d->mod, hist, n);
        d->map_len = n;
        return SP_OK;
    }
    if (!d->ctx || n <= 0 || d->sfx) return SP_OK;
    d->off = 0;
    double t0 = sp_now();
    /* a cache kept by sp_drafter_reset_keep holds hist[0..have): evaluate
     * the rest, at least one token (its logits start the first draft) */
    int32_t have = sp_ctx_n_past(d->ctx);
    sp_status st = SP_OK;
    if (have >= n && (st = sp_ctx_truncate(d->ctx, have = n - 1, NULL))) st = sp_ctx_truncate(d->ctx, have = 0, err);
    if (!st)
        st = sp_prefill(d->ctx, hist + have, n - have, d->dlogits ? d->dlogits : d->logits, &d->cnt.forwards,
                        d->fwd, d->fwd_ud, err);
    if (!st && d->dlogits) widen_rows(d, 1, d->logits);
    d->cnt.seconds += sp_now() - t0;
    return st;
}

static sp_status draft_chain(sp_drafter *d, const int32_t *hist, int32_t n, int32_t gamma,
                             int32_t n_min, float p_min, sp_sampler *smp, sp_rng *rng,
                             int32_t *draft, float *q, int32_t *n_draft, sp_error *err);

/* Evidence weight of the arbitration's acceptance prior (0.6). */
#define ARB_PRIOR 4.0

sp_status sp_drafter_chain(sp_drafter *d, const int32_t *hist, int32_t n, int32_t gamma,
                           int32_t n_min, float p_min, sp_sampler *smp, sp_rng *rng,
                           int32_t *draft, float *q, int32_t *n_draft, sp_error *err) {
    const int32_t V = d->V;
    *n_draft = 0;
    d->used = 0;
    if (d->sfx && d->kind != SP_DRAFT_SUFFIX) { /* arbitration */
        const double t0 = sp_now();
        if (d->arb_end > 0) {
            const double o = t0 - d->arb_end;
            d->arb_other = d->arb_other > 0 ? 0.8 * d->arb_other + 0.2 * o : o;
        }
        int32_t k = 0;
        sp_status st = sp_suffix_propose(d->sfx, hist, n, gamma, draft, &k, err);
        if (st) return st;
        /* expected emitted tokens per second of each choice: the suffix
         * chain, the other drafter, or drafting nothing */
        const double T = d->arb_other > 0 ? d->arb_other : 1e-3;
        const double a = (d->arb_acc + 0.6 * ARB_PRIOR) / (d->arb_tried + ARB_PRIOR);
        double e_other = 0, ak = 1;
        for (int32_t i = 0; i < gamma; i++) e_other += (ak *= a);
        const double r_sfx = k > 0 ? (1 + sp_suffix_last_expect(d->sfx)) / T : 0;
        const double r_other = (1 + e_other) / (T + gamma * d->arb_tok), r_none = 1 / T;
        if (k == 0 && r_none > r_other) { /* neither is worth its cost this step */
            d->arb_end = sp_now();
            return SP_OK;
        }
        if (k > 0) {
            if (r_sfx >= r_other) {
                for (int32_t i = 0; i < k; i++) {
                    float *qi = q + (int64_t)i * V;
                    memset(qi, 0, (size_t)V * sizeof(float));
                    qi[draft[i]] = 1.0f;
                }
                *n_draft = k;
                d->used = 1;
                d->used_len = k;
                d->arb_end = sp_now();
                return SP_OK;
            }
            sp_suffix_feedback(d->sfx, -1); /* not used */
        }
        st = draft_chain(d, hist, n, gamma, n_min, p_min, smp, rng, draft, q, n_draft, err);
        d->used = 2;
        d->used_len = *n_draft;
        d->arb_end = sp_now();
        if (*n_draft > 0) {
            const double tt = (d->arb_end - t0) / *n_draft;
            d->arb_tok = d->arb_tok > 0 ? 0.8 * d->arb_tok + 0.2 * tt : tt;
        }
        return st;
    }
    return draft_chain(d, hist, n, gamma, n_min, p_min, smp, rng, draft, q, n_draft, err);
}

/* One drafter's chain (the kinds themselves, no arbitration). */
static sp_status draft_chain(sp_drafter *d, const int32_t *hist, int32_t n, int32_t gamma,
                             int32_t n_min, float p_min, sp_sampler *smp, sp_rng *rng,
                             int32_t *draft, float *q, int32_t *n_draft, sp_error *err) {
    const int32_t V = d->V;
    *n_draft = 0;
    if (d->kind == SP_DRAFT_NGRAM || d->kind == SP_DRAFT_SUFFIX || d->kind == SP_DRAFT_NGRAM_CACHE ||
        d->map || d->mod) {
        int32_t k = 0;
        if (d->kind == SP_DRAFT_NGRAM) {
            k = sp_ngram_propose(hist, n, d->p.ngram_min, d->p.ngram_max, gamma, draft);
        } else if (d->map || d->mod) {
            /* llama.cpp's call: the history before the pending token, and it;
             * a history shorter than the last one is a new request */
            if (n - 1 < d->map_len) {
                if (d->map) sp_ngram_map_begin(d->map, hist, n - 1);
                if (d->mod) sp_ngram_mod_begin(d->mod, hist, n - 1);
            }
            d->map_len = n - 1;
            if (n > 0)
                k = d->map ? sp_ngram_map_draft(d->map, hist, n - 1, hist[n - 1], draft, gamma)
                           : sp_ngram_mod_draft(d->mod, hist, n - 1, hist[n - 1], draft, gamma);
        } else if (d->kind == SP_DRAFT_NGRAM_CACHE) {
            sp_status st = sp_suffix_propose_lookup(d->sfx, hist, n, gamma, d->p.ngram_min,
                                                    d->p.ngram_max, draft, &k, err);
            if (st) return st;
        } else {
            sp_status st = sp_suffix_propose(d->sfx, hist, n, gamma, draft, &k, err);
            if (st) return st;
        }
        for (int32_t i = 0; i < k; i++) {
            float *qi = q + (int64_t)i * V;
            memset(qi, 0, (size_t)V * sizeof(float));
            qi[draft[i]] = 1.0f;
        }
        *n_draft = k;
        return SP_OK;
    }
    if (d->ectx) return e3_chain(d, hist, n, gamma, n_min, p_min, smp, rng, draft, q, n_draft, err);
    if (d->mctx) return mtp_chain(d, hist, n, gamma, n_min, p_min, smp, rng, draft, q, n_draft, err);
    sp_status st = catch_up(d, hist, n, err);
    if (st) return st;
    for (int32_t i = 0; i < gamma; i++) {
        float *qi = q + (int64_t)i * V;
        sp_sampler_probs(smp, d->logits, qi);
        if (i >= n_min && p_min > 0 && row_max(qi, V) < p_min) break;
        draft[i] = sp_sample_from_probs(qi, V, sp_rng_uniform(rng));
        *n_draft = i + 1;
        if (i + 1 < gamma) {
            sp_batch b = {.tokens = &draft[i], .n = 1};
            if ((st = dforward(d, &b, d->logits, err))) return st;
        }
    }
    return SP_OK;
}

sp_status sp_drafter_accept_chain(sp_drafter *d, int32_t n, int32_t tau, sp_error *err) {
    if (d->sfx && (d->kind == SP_DRAFT_SUFFIX || d->used == 1)) sp_suffix_feedback(d->sfx, tau);
    if (d->map) sp_ngram_map_accept(d->map, tau);
    if (d->mod) sp_ngram_mod_accept(d->mod, tau);
    if (d->used == 2 && d->used_len > 0) { /* the other drafter's per-token acceptance */
        d->arb_acc = 0.97 * d->arb_acc + tau;
        d->arb_tried = 0.97 * d->arb_tried + (tau < d->used_len ? tau + 1 : tau);
    }
    d->used = 0;
    if (d->ectx || d->mctx) { /* the rows past the accepted ones were a rejected draft's */
        if (d->g0 + d->gn > n + tau) d->gn = n + tau > d->g0 ? n + tau - d->g0 : 0;
        return SP_OK;
    }
    if (!d->ctx) return SP_OK;
    int32_t keep = n + tau - d->off, have = sp_ctx_n_past(d->ctx);
    if (keep < 0) keep = 0;
    return sp_ctx_truncate(d->ctx, keep < have ? keep : have, err);
}

/* Children of one node: top-k by logit (greedy) or k draws from q. */
static int32_t pick_children(sp_drafter *d, const float *logits, const float *q, int32_t k,
                             bool greedy, sp_mc_mode mode, sp_rng *rng, int32_t *out) {
    const int32_t V = d->V;
    int32_t m = 0;
    if (greedy) {
        for (; m < k && m < V; m++) {
            int32_t best = -1;
            for (int32_t v = 0; v < V; v++) {
                bool used = false;
                for (int32_t j = 0; j < m; j++) used |= out[j] == v;
                if (!used && (best < 0 || logits[v] > logits[best])) best = v;
            }
            out[m] = best;
        }
        return m;
    }
    if (mode != SP_MC_NOREPLACE) {
        for (; m < k; m++) out[m] = sp_sample_from_probs(q, V, sp_rng_uniform(rng));
        return m;
    }
    float *w = d->row;
    memcpy(w, q, (size_t)V * sizeof(float));
    for (; m < k; m++) {
        bool any = false;
        for (int32_t v = 0; v < V && !any; v++) any = w[v] > 0;
        if (!any) break; /* q has fewer tokens than children asked for */
        out[m] = sp_sample_from_probs(w, V, sp_rng_uniform(rng));
        w[out[m]] = 0;
    }
    return m;
}

/* Grows the tree by one level: the children of frontier nodes [f0, f1)
 * (their logits rows in front, one per node, and their q rows in t->q) at
 * depth lev, as many as the shape's branch there while nodes are left.
 * Returns the first new node (the new frontier is [it, t->n_nodes)). */
static int32_t grow_level(sp_drafter *d, sp_draft_tree *t, const sp_tree_shape *shape, int32_t lev,
                          int32_t f0, int32_t f1, const float *front, bool greedy, sp_mc_mode mode,
                          sp_rng *rng) {
    const int32_t V = d->V, first_new = t->n_nodes;
    for (int32_t f = f0; f < f1; f++) {
        int32_t kids[SP_TREE_MAX_NODES];
        int32_t k = shape->branch[lev - 1];
        if (t->n_nodes + k > SP_TREE_MAX_NODES) k = SP_TREE_MAX_NODES - t->n_nodes;
        k = pick_children(d, front + (int64_t)(f - f0) * V, t->q + (int64_t)f * V, k, greedy, mode, rng, kids);
        for (int32_t j = 0; j < k; j++) {
            const int32_t c = t->n_nodes++;
            t->parent[c] = f;
            t->token[c] = kids[j];
            t->depth[c] = lev;
        }
    }
    return first_new;
}

/* The drafter's state for a tree rooted at hist[n-1]: the cache level with
 * the history, the root's logits in d->logits (eagle3, mtp: its pre-norm
 * output or h_out in tpre[0]), *base the first tree slot. *ready false:
 * no target row yet (eagle3, mtp), so a root without children. */
static sp_status tree_begin(sp_drafter *d, const int32_t *hist, int32_t n, int32_t *base, bool *ready,
                           sp_error *err) {
    sp_status st = SP_OK;
    *ready = true;
    if (d->ectx) {
        if (n < 2) return *ready = false, SP_OK;
        if (sp_eagle3_ctx_n_past(d->ectx) > n - 2) st = sp_eagle3_ctx_truncate(d->ectx, n - 2, err);
        if (!st) st = e3_pairs(d, hist, n - 2, err);
        if (st) return st;
        e3_drop_consumed(d);
        *base = sp_eagle3_ctx_n_past(d->ectx);
        memcpy(d->tpre, d->pre, (size_t)d->edim * sizeof(float));
    } else if (d->mctx) {
        if (n < 2 || n - 1 < d->moff) return *ready = false, SP_OK;
        st = mtp_truncate(d, n - 1, err);
        if (!st) st = mtp_slots(d, hist, n - 1, err);
        if (st) return st;
        mtp_drop_consumed(d);
        *base = sp_ctx_n_past(d->mctx);
        memcpy(d->tpre, d->pre, (size_t)d->edim * sizeof(float));
    } else {
        if ((st = catch_up(d, hist, n, err))) return st;
        *base = sp_ctx_n_past(d->ctx);
    }
    return SP_OK;
}

/* One level of a feature drafter's tree (EAGLE-3 head or MTP block) in one
 * call: rows d->tok[0..m) at depth lev under d->mask (m rows over the
 * tree's slots from base), row i pairing its token with tpre[par[i]] (its
 * parent's state); logits rows to d->logits, the rows' states to out. The
 * head's slot P holds position P + 1's pair (position n - 2 + lev), the
 * block's positions are shifted by moff. */
static sp_status feat_level(sp_drafter *d, int32_t n, int32_t base, int32_t lev, const int32_t *par, int32_t m,
                            float *out, sp_error *err) {
    const int32_t E = d->edim;
    if (d->gn + m > d->g_cap)
        return sp_fail(err, SP_ERR_RANGE, "tree level of %d nodes exceeds the drafter's rows", m);
    float *in = d->g + (size_t)d->gn * (size_t)E; /* scratch past the kept rows */
    for (int32_t i = 0; i < m; i++) {
        d->tpos[i] = d->ectx ? n - 2 + lev : n - 1 + lev - d->moff;
        memcpy(in + (size_t)i * E, d->tpre + (size_t)par[i] * E, (size_t)E * sizeof(float));
    }
    const double t0 = sp_now();
    sp_status st;
    if (d->ectx) {
        st = sp_eagle3_decode_tree(d->ectx, d->tok, in, d->tpos, m, d->mask, base, true, d->logits, out, err);
    } else {
        sp_batch b = {.tokens = d->tok, .pos = d->tpos, .n = m, .mask = d->mask, .mask_from_past = true,
                      .mask_base = base, .logits_all = true};
        st = sp_forward_mtp(d->mctx, &b, in, d->logits, out, err);
    }
    d->cnt.seconds += sp_now() - t0;
    d->cnt.forwards++;
    return st;
}

/* A fixed-shape tree from the EAGLE-3 head or the MTP block: the root is
 * the slot of the last committed token (as a chain's start); each level's
 * nodes are evaluated in one feat_level call under an ancestor mask over
 * the tree's slots, a node pairing its token with its parent's state. */
static sp_status feat_tree(sp_drafter *d, const int32_t *hist, int32_t n, const sp_tree_shape *shape,
                           int32_t max_depth, bool greedy, sp_mc_mode mode, sp_sampler *smp, sp_rng *rng,
                           sp_draft_tree *t, sp_error *err) {
    const int32_t V = d->V, E = d->edim;
    t->n_nodes = 1;
    t->parent[0] = -1;
    t->token[0] = hist[n - 1];
    t->depth[0] = 0;
    int32_t base = 0; /* the first tree slot */
    bool ready;
    sp_status st = tree_begin(d, hist, n, &base, &ready, err);
    if (st) return st;
    if (!ready) { /* no target row yet: a root without children */
        memset(t->q, 0, (size_t)V * sizeof(float));
        t->q[hist[n - 1]] = 1;
        return SP_OK;
    }
    sp_sampler_probs(smp, d->logits, t->q);
    int32_t f0 = 0, f1 = 1;
    const int32_t depth = max_depth < shape->depth ? max_depth : shape->depth;
    for (int32_t lev = 1; lev <= depth; lev++) {
        f0 = grow_level(d, t, shape, lev, f0, f1, d->logits, greedy, mode, rng);
        f1 = t->n_nodes;
        if (lev == depth || f1 == f0) break;
        const int32_t m = f1 - f0;
        if (m > d->max_batch)
            return sp_fail(err, SP_ERR_RANGE, "tree level of %d nodes exceeds the draft batch %d", m, d->max_batch);
        /* nodes 1..f0-1 sit at slots base.. (node a at base + a - 1); this level follows */
        const int32_t past = d->ectx ? sp_eagle3_ctx_n_past(d->ectx) : sp_ctx_n_past(d->mctx);
        sp_tree_ancestor_mask(t->parent, f0, m, 0, past + m - base, d->mask);
        for (int32_t i = 0; i < m; i++) d->tok[i] = t->token[f0 + i];
        if ((st = feat_level(d, n, base, lev, t->parent + f0, m, d->tpre + (size_t)f0 * E, err))) return st;
        for (int32_t i = 0; i < m; i++)
            sp_sampler_probs(smp, d->logits + (int64_t)i * V, t->q + (int64_t)(f0 + i) * V);
    }
    return d->ectx ? sp_eagle3_ctx_truncate(d->ectx, base, err) : sp_ctx_truncate(d->mctx, base, err);
}

/* ------------------------------------------------- dynamic trees (EAGLE-2) */

/* An entry of the ranking: a live node (cand < 0) or a child slot. */
typedef struct dyn_entry {
    double score;
    int32_t depth, seq, id, cand;
} dyn_entry;

/* The working set of a dynamic tree: live nodes by id (id 0 the root),
 * with the scores and tokens of each evaluated node's child slots. */
typedef struct dyn_ws {
    int32_t parent[SP_TREE_MAX_NODES], token[SP_TREE_MAX_NODES], depth[SP_TREE_MAX_NODES];
    int32_t seq[SP_TREE_MAX_NODES];  /* creation order: parents' rank, then slot */
    int32_t slot[SP_TREE_MAX_NODES]; /* the drafter's cache slot (from base); -1: not evaluated */
    int32_t qrow[SP_TREE_MAX_NODES]; /* row of dq holding its q; -1: not evaluated */
    int32_t nk[SP_TREE_MAX_NODES];   /* child slots with a positive score */
    bool live[SP_TREE_MAX_NODES];
    double score[SP_TREE_MAX_NODES];
    int32_t ctok[SP_TREE_MAX_NODES][SP_TREE_DYN_MAX_K];  /* greedy: the top-K tokens */
    double cval[SP_TREE_MAX_NODES][SP_TREE_DYN_MAX_K];   /* child slot scores, non-increasing */
    int32_t fin[SP_TREE_MAX_NODES];  /* final node index of a live id */
    /* a level's child slots s = e * K + j (the j-th of the e-th evaluated
     * node): creation order, and the node made from it (-1: none) */
    int32_t slot_seq[SP_TREE_DYN_MAX_K * SP_TREE_DYN_MAX_K], slot_id[SP_TREE_DYN_MAX_K * SP_TREE_DYN_MAX_K];
    dyn_entry ent[SP_TREE_MAX_NODES + SP_TREE_DYN_MAX_K * SP_TREE_DYN_MAX_K]; /* the ranking */
} dyn_ws;

/* The order every choice of a dynamic tree follows: higher score first,
 * then shallower, then created earlier. A child never precedes its parent
 * (score <=, deeper) nor slot j+1 slot j (score <=, later). */
static int dyn_cmp(const void *pa, const void *pb) {
    const dyn_entry *a = pa, *b = pb;
    if (a->score != b->score) return a->score > b->score ? -1 : 1;
    if (a->depth != b->depth) return a->depth < b->depth ? -1 : 1;
    return a->seq < b->seq ? -1 : a->seq > b->seq;
}

/* The child slots of evaluated node v (its logits row, its q row): scores
 * score(v) * s_j with s_j the j-th largest of q (sampling) or of the
 * draft's softmax at temperature 1 (greedy, whose children are the top-K
 * tokens by logit, in that order). Only slots of positive score count. */
static void dyn_children(sp_drafter *d, dyn_ws *w, int32_t v, int32_t K, const float *logits, const float *q,
                         bool greedy) {
    const int32_t V = d->V;
    double top[SP_TREE_DYN_MAX_K];
    int32_t m = 0;
    if (greedy) {
        m = pick_children(d, logits, q, K, true, SP_MC_NOREPLACE, NULL, w->ctok[v]);
        float mx = row_max(logits, V);
        double sum = 0;
        for (int32_t i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
        for (int32_t j = 0; j < m; j++) top[j] = exp((double)logits[w->ctok[v][j]] - mx) / sum;
    } else { /* the K largest values of q, by insertion */
        for (int32_t i = 0; i < V; i++) {
            const double x = q[i];
            if (!(x > 0) || (m == K && x <= top[m - 1])) continue;
            int32_t j = m < K ? m++ : K - 1;
            while (j > 0 && top[j - 1] < x) {
                top[j] = top[j - 1];
                j--;
            }
            top[j] = x;
        }
    }
    int32_t k = 0;
    while (k < m && w->score[v] * top[k] > 0) {
        w->cval[v][k] = w->score[v] * top[k];
        k++;
    }
    w->nk[v] = k;
}

/* Mask rows of the nodes ids[0..m) (their slots set) over the tree's
 * slots [0, width): each sees its own slot and its ancestors' (the root
 * is committed text, outside the mask). */
static void dyn_mask(const dyn_ws *w, const int32_t *ids, int32_t m, int32_t width, uint8_t *mask) {
    for (int32_t r = 0; r < m; r++) {
        uint8_t *row = mask + (int64_t)r * width;
        memset(row, 0, (size_t)width);
        for (int32_t a = ids[r]; a > 0; a = w->parent[a]) row[w->slot[a]] = 1;
    }
}

/* Evaluate nodes ids[0..m) at depth lev (slots set, following the n_eval
 * slots already used) in one forward: logits rows to d->logits, eagle3 and
 * mtp states to tpre[id] (from their parents' tpre). */
static sp_status dyn_eval(sp_drafter *d, dyn_ws *w, int32_t n, int32_t base, int32_t lev, const int32_t *ids,
                          int32_t m, int32_t n_eval, sp_error *err) {
    const int32_t E = d->edim, width = n_eval + m;
    if (m > d->max_batch)
        return sp_fail(err, SP_ERR_RANGE, "tree level of %d nodes exceeds the draft batch %d", m, d->max_batch);
    dyn_mask(w, ids, m, width, d->mask);
    for (int32_t i = 0; i < m; i++) d->tok[i] = w->token[ids[i]];
    sp_status st;
    if (d->ectx || d->mctx) {
        int32_t par[SP_TREE_MAX_NODES] = {0};
        if (d->gn + 2 * m > d->g_cap)
            return sp_fail(err, SP_ERR_RANGE, "tree level of %d nodes exceeds the drafter's rows", m);
        float *out = d->g + (size_t)(d->gn + m) * (size_t)E; /* past feat_level's input rows */
        for (int32_t i = 0; i < m; i++) par[i] = w->parent[ids[i]];
        st = feat_level(d, n, base, lev, par, m, out, err);
        for (int32_t i = 0; !st && i < m; i++)
            memcpy(d->tpre + (size_t)ids[i] * E, out + (size_t)i * E, (size_t)E * sizeof(float));
        return st;
    }
    for (int32_t i = 0; i < m; i++) d->pos[i] = n - 1 + lev - d->off;
    sp_batch b = {.tokens = d->tok, .pos = d->pos, .n = m, .mask = d->mask, .mask_from_past = true,
                  .mask_base = base, .logits_all = true};
    return dforward(d, &b, d->logits, err);
}

/* Buffers of a dynamic tree: the working set and q rows for the nodes a
 * tree of this shape evaluates (the root and K per level but the last).
 * Made at the first tree and kept (the shape is fixed per loop). */
static sp_status dyn_reserve(sp_drafter *d, const sp_tree_shape *shape, sp_error *err) {
    const int32_t rows = 1 + shape->dyn_k * (shape->depth - 1);
    if (!d->dyn && !(d->dyn = malloc(sizeof *d->dyn)))
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for a dynamic tree");
    if (rows > d->dq_rows) {
        float *q = realloc(d->dq, (size_t)rows * (size_t)d->V * sizeof(float));
        if (!q) return sp_fail(err, SP_ERR_NOMEM, "out of memory for a dynamic tree's %d draft rows", rows);
        d->dq = q;
        d->dq_rows = rows;
    }
    return SP_OK;
}

/* A dynamic tree (sp_spec.h, "dyn:K:D:N"), EAGLE-2's construction: each
 * level's child slots are ranked with every live node by dyn_cmp, the
 * first N stay (the others and their subtrees go; the order puts parents
 * before children, so what stays is ancestor-closed), the slots that stay
 * are filled (greedy: the top-K tokens; sampling: drawn from the parent's
 * q as the verifier's mode draws candidates), and the K best new nodes are
 * evaluated in one forward for the next level.
 *
 * Contract with the multi-candidate verifiers (mc, mc-norep, naive, which
 * walk the tree testing a node's children in index order as if drawn one
 * after another from its q): whether a node's j-th drawn child exists must
 * not depend on the value of that child, of its later siblings or of their
 * subtrees, since given the earlier children each draw must still be
 * distributed as q (or q without the earlier ones). Pruning by the child's
 * own probability breaks this (dropping a sampled child because it is
 * unlikely changes which tokens the verifier sees). Here a slot's score is
 * fixed before it is drawn (its parent's score times the j-th largest
 * probability of the parent's q: a function of ancestors only), scores do
 * not increase from parent to child nor from slot j to j+1, and every
 * choice (which slots stay, which nodes are evaluated) is a first-N or
 * first-K of dyn_cmp. So the kept children of a node are a prefix of its
 * slots in drawing order, and a draw's value can only displace entries
 * that come after it in the order, which are its own later siblings and
 * descendants (and nodes displaced by those, later still): never a node
 * ahead of it. Traversal verification and GBV reason about a tree shape
 * fixed in advance and are refused (spec_config.c). At temperature 0 the
 * greedy walk is exact for any tree. */
static sp_status dyn_tree(sp_drafter *d, const int32_t *hist, int32_t n, const sp_tree_shape *shape,
                          int32_t max_depth, bool greedy, sp_mc_mode mode, sp_sampler *smp, sp_rng *rng,
                          sp_draft_tree *t, sp_error *err) {
    const int32_t V = d->V, K = shape->dyn_k, N = shape->n_nodes - 1;
    const int32_t D = max_depth < shape->depth ? max_depth : shape->depth;
    sp_status st = dyn_reserve(d, shape, err);
    if (st) return st;
    dyn_ws *w = d->dyn;
    t->n_nodes = 1;
    t->parent[0] = -1;
    t->token[0] = hist[n - 1];
    t->depth[0] = 0;
    d->tree_cached = 0;
    d->tree_dyn = true;
    d->tslot[0] = -1;
    int32_t base = 0;
    bool ready;
    if ((st = tree_begin(d, hist, n, &base, &ready, err))) return st;
    if (!ready) {
        memset(t->q, 0, (size_t)V * sizeof(float));
        t->q[hist[n - 1]] = 1;
        return SP_OK;
    }
    w->parent[0] = -1;
    w->token[0] = hist[n - 1];
    w->depth[0] = 0;
    w->seq[0] = 0;
    w->slot[0] = -1;
    w->qrow[0] = 0;
    w->score[0] = 1;
    for (int32_t i = 0; i < SP_TREE_MAX_NODES; i++) w->live[i] = i == 0;
    sp_sampler_probs(smp, d->logits, d->dq);
    dyn_children(d, w, 0, K, d->logits, d->dq, greedy);
    /* the evaluated nodes of the newest level, best first */
    int32_t exp_ids[SP_TREE_DYN_MAX_K], n_exp = 1, n_eval = 0, n_rows = 1, seq = 1;
    exp_ids[0] = 0;
    for (int32_t lev = 1; lev <= D; lev++) {
        /* rank the live nodes and this level's slots (slot s = e * K + j:
         * the j-th child of exp_ids[e]); the first N stay */
        dyn_entry *ent = w->ent;
        int32_t ne = 0;
        for (int32_t id = 1; id < SP_TREE_MAX_NODES; id++)
            if (w->live[id]) ent[ne++] = (dyn_entry){w->score[id], w->depth[id], w->seq[id], id, -1};
        for (int32_t e = 0; e < n_exp; e++)
            for (int32_t j = 0; j < w->nk[exp_ids[e]]; j++) {
                w->slot_seq[e * K + j] = seq;
                ent[ne++] = (dyn_entry){w->cval[exp_ids[e]][j], lev, seq++, -1, e * K + j};
            }
        qsort(ent, (size_t)ne, sizeof *ent, dyn_cmp);
        for (int32_t s = 0; s < n_exp * K; s++) w->slot_id[s] = -1;
        for (int32_t i = 0; i < ne; i++) {
            if (ent[i].cand >= 0) w->slot_id[ent[i].cand] = i < N ? 0 : -1; /* 0: stays */
            else if (i >= N) w->live[ent[i].id] = false;
        }
        /* fill the slots that stay, per parent in slot order (a prefix of
         * its slots), drawing as the verifier's mode requires */
        int32_t n_new = 0, free_id = 1;
        for (int32_t e = 0; e < n_exp; e++) {
            /* none of its slots stays: it may have been dropped, its id
             * even reused by a new node this level */
            if (w->slot_id[e * K] != 0) continue;
            const int32_t v = exp_ids[e];
            const float *qv = d->dq + (size_t)w->qrow[v] * V;
            if (!greedy && mode == SP_MC_NOREPLACE) memcpy(d->row, qv, (size_t)V * sizeof(float));
            for (int32_t j = 0; j < w->nk[v] && w->slot_id[e * K + j] == 0; j++) {
                while (w->live[free_id]) free_id++;
                SP_ASSERT(free_id <= N);
                const int32_t c = free_id;
                int32_t tok;
                if (greedy) {
                    tok = w->ctok[v][j];
                } else if (mode == SP_MC_NOREPLACE) {
                    tok = sp_sample_from_probs(d->row, V, sp_rng_uniform(rng));
                    SP_ASSERT(tok >= 0);
                    d->row[tok] = 0;
                } else {
                    tok = sp_sample_from_probs(qv, V, sp_rng_uniform(rng));
                    SP_ASSERT(tok >= 0);
                }
                w->live[c] = true;
                w->parent[c] = v;
                w->token[c] = tok;
                w->depth[c] = lev;
                w->seq[c] = w->slot_seq[e * K + j];
                w->score[c] = w->cval[v][j];
                w->slot[c] = w->qrow[c] = -1;
                w->slot_id[e * K + j] = c;
                n_new++;
            }
        }
        if (n_new == 0 || lev == D) break;
        /* evaluate the K best new nodes (in the ranking's order) */
        int32_t m = 0, ids[SP_TREE_DYN_MAX_K];
        for (int32_t i = 0; i < ne && i < N && m < K; i++)
            if (ent[i].cand >= 0 && w->slot_id[ent[i].cand] > 0) ids[m++] = w->slot_id[ent[i].cand];
        for (int32_t i = 0; i < m; i++) w->slot[ids[i]] = n_eval + i;
        if ((st = dyn_eval(d, w, n, base, lev, ids, m, n_eval, err))) return st;
        n_eval += m;
        for (int32_t i = 0; i < m; i++) {
            SP_ASSERT(n_rows < d->dq_rows);
            w->qrow[ids[i]] = n_rows;
            float *q = d->dq + (size_t)n_rows++ * V;
            sp_sampler_probs(smp, d->logits + (int64_t)i * V, q);
            dyn_children(d, w, ids[i], K, d->logits + (int64_t)i * V, q, greedy);
            exp_ids[i] = ids[i];
        }
        n_exp = m;
    }
    /* the live nodes breadth-first (depth, then creation): parents first,
     * a node's children in drawing order */
    int32_t ne = 0;
    for (int32_t id = 1; id < SP_TREE_MAX_NODES; id++)
        if (w->live[id]) w->ent[ne++] = (dyn_entry){0, w->depth[id], w->seq[id], id, -1};
    qsort(w->ent, (size_t)ne, sizeof *w->ent, dyn_cmp);
    w->fin[0] = 0;
    memcpy(t->q, d->dq, (size_t)V * sizeof(float));
    for (int32_t i = 0; i < ne; i++) {
        const int32_t id = w->ent[i].id, f = i + 1;
        w->fin[id] = f;
        t->parent[f] = w->fin[w->parent[id]];
        t->token[f] = w->token[id];
        t->depth[f] = w->depth[id];
        d->tslot[f] = w->slot[id];
        if (w->qrow[id] >= 0) memcpy(t->q + (size_t)f * V, d->dq + (size_t)w->qrow[id] * V, (size_t)V * sizeof(float));
    }
    t->n_nodes = ne + 1;
    if (d->ctx) d->tree_cached = n_eval; /* (tree nodes are in the cache: see sp_drafter_reset_keep) */
    if (d->ectx) return sp_eagle3_ctx_truncate(d->ectx, base, err);
    if (d->mctx) return sp_ctx_truncate(d->mctx, base, err);
    return SP_OK;
}

sp_status sp_drafter_tree(sp_drafter *d, const int32_t *hist, int32_t n,
                          const sp_tree_shape *shape, int32_t max_depth, bool greedy,
                          sp_mc_mode mode, sp_sampler *smp, sp_rng *rng, sp_draft_tree *t,
                          sp_error *err) {
    d->tree_dyn = false;
    if (shape->dyn_k) {
        if (!d->ctx && !d->ectx && !d->mctx)
            return sp_fail(err, SP_ERR_ARG, "dynamic trees need a model-based drafter (model, layerskip, lowbit, "
                           "eagle3, mtp)");
        return dyn_tree(d, hist, n, shape, max_depth, greedy, mode, smp, rng, t, err);
    }
    if (d->ectx || d->mctx) return feat_tree(d, hist, n, shape, max_depth, greedy, mode, smp, rng, t, err);
    if (d->kind == SP_DRAFT_SUFFIX) {
        sp_suffix_tree st = {.parent = t->parent, .token = t->token, .depth = t->depth, .q = t->q};
        int32_t depth = max_depth < shape->depth ? max_depth : shape->depth;
        sp_status rc = sp_suffix_propose_tree(d->sfx, hist, n, shape->branch, depth < 0 ? 0 : depth,
                                              shape->n_nodes, greedy, mode == SP_MC_NOREPLACE, rng,
                                              d->V, &st, err);
        t->n_nodes = st.n_nodes;
        (void)smp;
        return rc;
    }
    if (!d->ctx) return sp_fail(err, SP_ERR_ARG, "trees need a model-based drafter (model, layerskip, lowbit, eagle3) or suffix");
    const int32_t V = d->V;
    int32_t base = 0; /* first tree slot in the draft cache */
    bool ready;
    sp_status st = tree_begin(d, hist, n, &base, &ready, err);
    if (st) return st;
    t->n_nodes = 1;
    t->parent[0] = -1;
    t->token[0] = hist[n - 1];
    t->depth[0] = 0;
    sp_sampler_probs(smp, d->logits, t->q);
    /* logits of the current frontier, row per frontier node */
    const float *front_logits = d->logits;
    int32_t f0 = 0, f1 = 1; /* frontier = nodes [f0, f1) */
    d->tree_cached = 0;
    int32_t depth = max_depth < shape->depth ? max_depth : shape->depth;
    for (int32_t lev = 1; lev <= depth; lev++) {
        f0 = grow_level(d, t, shape, lev, f0, f1, front_logits, greedy, mode, rng);
        f1 = t->n_nodes;
        if (lev == depth || f1 == f0) break;
        /* evaluate this level in one draft forward under a tree mask */
        int32_t m = f1 - f0;
        if (m > d->max_batch)
            return sp_fail(err, SP_ERR_RANGE, "tree level of %d nodes exceeds the draft batch %d", m,
                           d->max_batch);
        /* nodes 1..f0-1 are cached from slot `base` on (node a at base + a - 1),
         * this level's nodes follow them */
        int32_t w = sp_ctx_n_past(d->ctx) + m - base;
        sp_tree_ancestor_mask(t->parent, f0, m, 0, w, d->mask);
        for (int32_t i = 0; i < m; i++) {
            d->tok[i] = t->token[f0 + i];
            d->pos[i] = n - 1 + lev - d->off;
        }
        sp_batch b = {.tokens = d->tok, .pos = d->pos, .n = m, .mask = d->mask,
                      .mask_from_past = true, .mask_base = base, .logits_all = true};
        if ((st = dforward(d, &b, d->logits, err))) return st;
        d->tree_cached = f1 - 1;
        for (int32_t i = 0; i < m; i++)
            sp_sampler_probs(smp, d->logits + (int64_t)i * V, t->q + (int64_t)(f0 + i) * V);
        front_logits = d->logits;
    }
    return SP_OK;
}

sp_status sp_drafter_accept_tree(sp_drafter *d, int32_t n, const sp_draft_tree *t,
                                 const int32_t *path, int32_t n_path, sp_error *err) {
    (void)t;
    if (d->ectx || d->mctx) { /* keep the target rows of the tail and of the accepted path's nodes */
        const int32_t keep = n - d->g0; /* rows of positions g0..n-1 */
        if (keep < 0 || keep > d->gn) return SP_OK; /* nothing of this pass was seen */
        int32_t m = keep;
        for (int32_t i = 0; i < n_path; i++) {
            const int32_t r = keep + path[i] - 1;
            if (r >= d->gn) break;
            if (r != m) memmove(d->g + (size_t)m * d->edim, d->g + (size_t)r * d->edim, (size_t)d->edim * sizeof(float));
            m++;
        }
        d->gn = m;
        return SP_OK;
    }
    if (d->kind == SP_DRAFT_SUFFIX) sp_suffix_feedback(d->sfx, n_path);
    /* A tree trimmed to depth 0 drafted nothing and left the cache behind:
     * the next catch-up brings it level. */
    if (!d->ctx || sp_ctx_n_past(d->ctx) < n - d->off) return SP_OK;
    int32_t idx[SP_TREE_MAX_DEPTH + 1], m = 0;
    if (d->tree_dyn) /* the evaluated nodes (a prefix of the path) at their slots */
        for (int32_t i = 0; i < n_path && d->tslot[path[i]] >= 0; i++) idx[m++] = d->tslot[path[i]];
    else
        for (int32_t i = 0; i < n_path && path[i] <= d->tree_cached; i++) idx[m++] = path[i] - 1;
    d->tree_cached = 0;
    return sp_ctx_keep(d->ctx, n - d->off, idx, m, err);
}
