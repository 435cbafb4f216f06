/* draft: drafters (draft model, prompt lookup, layer skip, low-bit copy,
 * suffix tries in suffix.c),
 * chain and tree drafting, and keeping the draft cache in step with the
 * committed text. See sp_draft.h. */
#include "draft.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "sp_clock.h"
#include "sp_generate.h"

struct sp_drafter {
    sp_drafter_params p;
    sp_drafter_kind kind;
    sp_model *owned_model;   /* lowbit copy */
    sp_ctx *ctx;             /* NULL for ngram and suffix */
    sp_suffix *sfx;          /* suffix, and with_suffix (arbitration) */
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

static const char *const KIND_NAMES[] = {"none",   "model",  "ngram",      "layerskip",
                                         "lowbit", "suffix", "ngram-cache"};

const char *sp_drafter_name(sp_drafter_kind k) {
    return (unsigned)k < sizeof KIND_NAMES / sizeof KIND_NAMES[0] ? KIND_NAMES[k] : "unknown";
}

sp_status sp_drafter_parse(const char *name, sp_drafter_kind *out, sp_error *err) {
    for (int i = 0; i < (int)(sizeof KIND_NAMES / sizeof KIND_NAMES[0]); i++)
        if (name && !strcmp(name, KIND_NAMES[i])) {
            *out = (sp_drafter_kind)i;
            return SP_OK;
        }
    return sp_fail(err, SP_ERR_ARG, "unknown drafter '%s' (model, ngram, layerskip, lowbit, suffix, ngram-cache, "
                   "none)",
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
                           .lowbit_type = SP_GGML_Q4_0, .max_batch = SP_CTX_DEFAULT_BATCH};
    return p;
}

void sp_drafter_free(sp_drafter *d) {
    if (!d) return;
    sp_ctx_free(d->ctx);
    sp_suffix_free(d->sfx);
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

sp_status sp_drafter_reset(sp_drafter *d, sp_error *err) {
    d->off = 0;
    d->tree_cached = 0;
    d->used = 0;
    if (d->sfx) { /* its output joins the corpus */
        sp_status st = sp_suffix_end_request(d->sfx, err);
        if (st) return st;
    }
    return d->ctx ? sp_ctx_truncate(d->ctx, 0, err) : SP_OK;
}
const sp_draft_counters *sp_drafter_counters(const sp_drafter *d) { return &d->cnt; }

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
        return SP_OK;
    case SP_DRAFT_LAYERSKIP: {
        if (L > SP_DRAFT_MAX_LAYERS)
            return sp_fail(err, SP_ERR_UNSUPPORTED, "skip_layers: the target has %d layers, more than %d",
                           L, SP_DRAFT_MAX_LAYERS);
        bool skip[SP_DRAFT_MAX_LAYERS];
        return sp_parse_skip_layers(p->skip_layers, L, skip, err);
    }
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
    d->max_batch = p->max_batch > 0 ? p->max_batch : SP_CTX_DEFAULT_BATCH;
    const sp_model *dm = NULL;
    bool skip_buf[SP_DRAFT_MAX_LAYERS];
    switch (p->kind) {
    case SP_DRAFT_MODEL: dm = p->draft_model; break;
    case SP_DRAFT_LOWBIT:
        st = sp_model_requantize(tm, p->lowbit_type, &d->owned_model, err);
        dm = d->owned_model;
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
    if (!st && dm) {
        sp_ctx_params cp = sp_ctx_default_params();
        cp.n_ctx = sp_ctx_n_ctx(target);
        cp.max_batch = d->max_batch;
        cp.pool = sp_ctx_pool(target);
        d->Vd = sp_model_cfg(dm)->n_vocab;
        st = sp_ctx_init(dm, &cp, &d->ctx, err);
        if (!st && p->kind == SP_DRAFT_LAYERSKIP) st = sp_ctx_set_skip_layers(d->ctx, skip_buf, err);
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
    sp_status st = sp_forward(d->ctx, b, d->dlogits ? d->dlogits : logits, err);
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

sp_status sp_drafter_prefill(sp_drafter *d, const int32_t *hist, int32_t n, sp_error *err) {
    /* arbitrated: the draft cache is filled when the drafter is first chosen
     * (catch_up; a long gap restarts it from the last DRAFT_RESYNC_KEEP
     * tokens), so a request the suffix drafter serves alone never pays the
     * draft model's prefill */
    if (!d->ctx || n <= 0 || d->sfx) return SP_OK;
    d->off = 0;
    double t0 = sp_now();
    sp_status st = sp_prefill(d->ctx, hist, n, d->dlogits ? d->dlogits : d->logits, &d->cnt.forwards, err);
    if (!st && d->dlogits) widen_rows(d, 1, d->logits);
    d->cnt.seconds += sp_now() - t0;
    return st;
}

static float row_max(const float *x, int32_t n) {
    float m = x[0];
    for (int32_t i = 1; i < n; i++) m = x[i] > m ? x[i] : m;
    return m;
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
    if (d->kind == SP_DRAFT_NGRAM || d->kind == SP_DRAFT_SUFFIX || d->kind == SP_DRAFT_NGRAM_CACHE) {
        int32_t k = 0;
        if (d->kind == SP_DRAFT_NGRAM) {
            k = sp_ngram_propose(hist, n, d->p.ngram_min, d->p.ngram_max, gamma, draft);
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
    if (d->used == 2 && d->used_len > 0) { /* the other drafter's per-token acceptance */
        d->arb_acc = 0.97 * d->arb_acc + tau;
        d->arb_tried = 0.97 * d->arb_tried + (tau < d->used_len ? tau + 1 : tau);
    }
    d->used = 0;
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

sp_status sp_drafter_tree(sp_drafter *d, const int32_t *hist, int32_t n,
                          const sp_tree_shape *shape, int32_t max_depth, bool greedy,
                          sp_mc_mode mode, sp_sampler *smp, sp_rng *rng, sp_draft_tree *t,
                          sp_error *err) {
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
    if (!d->ctx) return sp_fail(err, SP_ERR_ARG, "trees need a model-based or suffix drafter");
    const int32_t V = d->V;
    sp_status st = catch_up(d, hist, n, err);
    if (st) return st;
    const int32_t base = sp_ctx_n_past(d->ctx); /* first tree slot in the draft cache */
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
        int32_t first_new = t->n_nodes;
        for (int32_t f = f0; f < f1; f++) {
            int32_t kids[SP_TREE_MAX_NODES];
            int32_t k = shape->branch[lev - 1];
            if (t->n_nodes + k > SP_TREE_MAX_NODES) k = SP_TREE_MAX_NODES - t->n_nodes;
            k = pick_children(d, front_logits + (int64_t)(f - f0) * V, t->q + (int64_t)f * V, k,
                              greedy, mode, rng, kids);
            for (int32_t j = 0; j < k; j++) {
                int32_t c = t->n_nodes++;
                t->parent[c] = f;
                t->token[c] = kids[j];
                t->depth[c] = lev;
            }
        }
        f0 = first_new;
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
    if (d->kind == SP_DRAFT_SUFFIX) sp_suffix_feedback(d->sfx, n_path);
    /* A tree trimmed to depth 0 drafted nothing and left the cache behind:
     * the next catch-up brings it level. */
    if (!d->ctx || sp_ctx_n_past(d->ctx) < n - d->off) return SP_OK;
    int32_t idx[SP_TREE_MAX_DEPTH + 1], m = 0;
    for (int32_t i = 0; i < n_path && path[i] <= d->tree_cached; i++) idx[m++] = path[i] - 1;
    d->tree_cached = 0;
    return sp_ctx_keep(d->ctx, n - d->off, idx, m, err);
}
