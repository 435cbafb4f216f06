/* spec: the speculative generation loop: draft, one batched target forward,
 * verify, commit, roll back. Orchestration only; drafting is in draft.c,
 * verification in verify*.c, arithmetic in model.c. */
#include "sp_spec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "draft.h"
#include "clock.h"
#include "rng.h"
#include "suffix.h"
#include "verify.h"
#include "spec_config.h"
#include "tree.h"

struct sp_spec {
    sp_spec_params prm;
    sp_ctx *target;
    sp_drafter *drafter;     /* NULL for plain decoding */
    sp_verify_ws *ws;
    sp_tree_shape shape;
    bool is_tree;
    int32_t V;
    int32_t max_nodes;       /* chain: gamma + 1; tree: shape nodes */
    /* buffers sized at init */
    float *q;                /* [max_nodes][V] draft distributions */
    float *p;                /* [max_nodes][V] target distributions */
    float *logits;           /* [batch][V] target logits */
    int32_t *batch_tok, *batch_pos;
    uint8_t *mask;           /* [batch][batch] */
    int32_t *draft;          /* [max_nodes] */
    sp_draft_tree tree;
    int32_t batch_cap;
    sp_adapt adapt;          /* the adaptive draft length (adapt.h) */
    sp_spec_observer observer; /* sees the target rows of verified positions */
    void *observer_ud;
    int32_t obs_row0, obs_rows; /* the observed rows' first batch row in the target pass, and their count */
    int64_t draft_fwd_carry; /* draft forwards of drafters replaced by sp_spec_set_draft_model */
    bool draft_stale;        /* a new draft model was swapped in: prefill it before drafting */
    sp_spec_forward_fn forward; /* target forwards (sp_spec_set_forward); NULL = sp_forward */
    void *forward_ud;
    sp_forward_fn fwd;          /* the running generation's: its params' or forward */
    void *fwd_ud;
    sp_forward_fn dforward;     /* the draft model's forwards; NULL = sp_forward */
    void *dforward_ud;
    int32_t *prev, n_prev, prev_cap; /* the last generation's history (what a kept draft cache holds) */
};

/* Total draft forwards of this object's drafters (the current one's
 * counter restarts when a new draft model is swapped in). */
static int64_t draft_forwards(const sp_spec *s) {
    return s->draft_fwd_carry + sp_drafter_counters(s->drafter)->forwards;
}

const sp_model *sp_spec_draft_model(const sp_spec *s) {
    return s->drafter && s->prm.draft.kind == SP_DRAFT_MODEL ? s->prm.draft.draft_model : NULL;
}

bool sp_spec_suffix_stats(const sp_spec *s, sp_suffix_stats *out) {
    sp_suffix *x = s && s->drafter ? sp_drafter_suffix(s->drafter) : NULL;
    if (!x) return false;
    *out = sp_suffix_get_stats(x);
    return true;
}

/* A drafter for s's settings drafting with model m (its batch sized for
 * the widest tree level). */
static sp_status drafter_for(const sp_spec *s, const sp_model *m, sp_drafter **out, sp_error *err) {
    sp_drafter_params dp = s->prm.draft;
    dp.draft_model = m;
    int32_t level = s->is_tree ? sp_tree_shape_max_level(&s->shape) : 1;
    dp.max_batch = level > SP_DRAFT_DEFAULT_BATCH ? level : SP_DRAFT_DEFAULT_BATCH;
    return sp_drafter_init(&dp, s->target, out, err);
}

sp_status sp_spec_set_draft_model(sp_spec *s, const sp_model *m, sp_error *err) {
    if (!s->drafter || s->prm.draft.kind != SP_DRAFT_MODEL)
        return sp_fail(err, SP_ERR_ARG, "drafter: only a draft-model drafter can take a new draft model");
    sp_drafter *d = NULL;
    sp_status st = drafter_for(s, m, &d, err);
    if (st) return st;
    /* the new drafter's cache is empty: the loop prefills it with the
     * committed text before its next draft (draft_stale) */
    s->draft_fwd_carry += sp_drafter_counters(s->drafter)->forwards;
    sp_drafter_free(s->drafter);
    s->drafter = d;
    s->dforward = NULL; /* a hook of the old model's (a batcher is of one model) */
    s->dforward_ud = NULL;
    s->prm.draft.draft_model = m;
    s->draft_stale = true;
    return SP_OK;
}

sp_status sp_spec_set_eagle3(sp_spec *s, const sp_eagle3 *h, sp_error *err) {
    if (!s->drafter || s->prm.draft.kind != SP_DRAFT_EAGLE3)
        return sp_fail(err, SP_ERR_ARG, "drafter: only an eagle3 drafter can take a new head");
    sp_status st = sp_drafter_set_head(s->drafter, h, err);
    if (!st) s->prm.draft.eagle3 = h;
    return st;
}

const sp_eagle3 *sp_spec_eagle3(const sp_spec *s) {
    return s->drafter && s->prm.draft.kind == SP_DRAFT_EAGLE3 ? s->prm.draft.eagle3 : NULL;
}

const float *sp_spec_observed_taps(const sp_spec *s, int32_t i) {
    int32_t rows = 0;
    const float *t = s->obs_rows > 0 ? sp_ctx_taps(s->target, i, &rows) : NULL;
    if (!t || s->obs_row0 + s->obs_rows > rows) return NULL;
    return t + (int64_t)s->obs_row0 * sp_model_cfg(sp_ctx_model(s->target))->dim;
}

void sp_spec_set_forward(sp_spec *s, sp_spec_forward_fn fn, void *ud) {
    s->forward = fn;
    s->forward_ud = ud;
}

void sp_spec_set_draft_forward(sp_spec *s, sp_forward_fn fn, void *ud) {
    s->dforward = fn;
    s->dforward_ud = ud;
    if (s->drafter) sp_drafter_set_forward(s->drafter, fn, ud);
}

/* One target forward through the hook (the generation's, or
 * sp_spec_set_forward's) or sp_forward;
 * *cost: the seconds the adaptive controller charges for it (the hook's
 * figure, else the wall time). */
static sp_status target_forward(sp_spec *s, const sp_batch *b, float *logits, double *cost,
                                sp_error *err) {
    const double t0 = sp_now();
    *cost = -1;
    sp_status rc = s->fwd ? s->fwd(s->fwd_ud, s->target, b, logits, cost, err)
                              : sp_forward(s->target, b, logits, err);
    if (*cost < 0) *cost = sp_now() - t0;
    return rc;
}

void sp_spec_set_observer(sp_spec *s, sp_spec_observer fn, void *ud) {
    s->observer = fn;
    s->observer_ud = ud;
}

sp_spec_params sp_spec_default_params(void) {
    sp_spec_params p = {.draft = sp_drafter_default_params(), .verifier = SP_VERIFIER_BLOCK,
                        .lenience = 1.0, .gamma = 4, .draft_n_min = 1, .adaptive = false,
                        .draft_p_min = 0, .tree = {0}};
    return p;
}

double sp_spec_acceptance_rate(const sp_spec_stats *s) {
    return s->drafted ? (double)s->accepted / (double)s->drafted : 0;
}
double sp_spec_block_efficiency(const sp_spec_stats *s) {
    int64_t f = s->target_forwards - s->prefill_forwards;
    return f ? (double)s->emitted / (double)f : 0;
}
double sp_spec_mean_accepted(const sp_spec_stats *s) {
    return s->iterations ? (double)s->accepted / (double)s->iterations : 0;
}

void sp_spec_free(sp_spec *s) {
    if (!s) return;
    sp_drafter_free(s->drafter);
    free(s->prev);
    sp_verify_ws_free(s->ws);
    free(s->q);
    free(s->p);
    free(s->logits);
    free(s->batch_tok);
    free(s->batch_pos);
    free(s->mask);
    free(s->draft);
    free(s->tree.parent);
    free(s->tree.token);
    free(s->tree.depth);
    free(s);
}

sp_status sp_spec_init(sp_ctx *target, const sp_spec_params *p, sp_spec **out, sp_error *err) {
    *out = NULL;
    sp_status st = sp_spec_config_check(p, target, err);
    if (st) return st;
    sp_spec *s = calloc(1, sizeof *s);
    if (!s) return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    s->prm = *p;
    s->target = target;
    sp_adapt_init(&s->adapt);
    s->V = sp_model_cfg(sp_ctx_model(target))->n_vocab;
    s->is_tree = p->draft.kind != SP_DRAFT_NONE && p->tree.depth > 0;
    s->shape = p->tree;
    /* nodes with a target row: the root plus the budget */
    s->max_nodes = sp_spec_config_budget(p) + 1;
    /* the uncommitted tail (normally 1 token) plus every drafted node */
    s->batch_cap = s->max_nodes + 1;
    if (p->draft.kind != SP_DRAFT_NONE) st = drafter_for(s, p->draft.draft_model, &s->drafter, err);
    if (!st) st = sp_verify_ws_init(s->V, &s->ws, err);
    if (!st) {
        size_t V = (size_t)s->V, N = (size_t)s->max_nodes, B = (size_t)s->batch_cap;
        s->q = malloc(N * V * sizeof(float));
        s->p = malloc(N * V * sizeof(float));
        s->logits = malloc(B * V * sizeof(float));
        s->batch_tok = malloc(B * sizeof(int32_t));
        s->batch_pos = malloc(B * sizeof(int32_t));
        s->mask = malloc(B * B);
        s->draft = malloc(N * sizeof(int32_t));
        s->tree.parent = malloc(N * sizeof(int32_t));
        s->tree.token = malloc(N * sizeof(int32_t));
        s->tree.depth = malloc(N * sizeof(int32_t));
        s->tree.q = s->q;
        if (!s->q || !s->p || !s->logits || !s->batch_tok || !s->batch_pos || !s->mask ||
            !s->draft || !s->tree.parent || !s->tree.token || !s->tree.depth)
            st = sp_fail(err, SP_ERR_NOMEM, "out of memory for speculation buffers (%zu x %zu)", N, V);
    }
    if (st) {
        sp_spec_free(s);
        return st;
    }
    *out = s;
    return SP_OK;
}

sp_status sp_spec_reset(sp_spec *s, sp_error *err) { return sp_spec_reset_keep(s, 0, err); }

sp_status sp_spec_reset_keep(sp_spec *s, int32_t n_keep, sp_error *err) {
    sp_adapt_new_text(&s->adapt);
    sp_status st = sp_ctx_truncate(s->target, n_keep, err);
    if (!st && s->drafter) st = sp_drafter_reset_keep(s->drafter, n_keep, err);
    if (n_keep == 0) s->n_prev = 0;
    return st;
}

/* ------------------------------------------------------------------ loop */

typedef struct emit_state {
    int32_t *out, cap, n;
    int32_t budget;
    const sp_tokenizer *tok;
    bool stop_at_eog, hit_eog, stop;
    sp_token_cb cb;
    void *ud;
} emit_state;

/* Appends tokens to the output (and the history), honouring the budget and
 * EOS; returns how many were taken. */
static int32_t emit(emit_state *e, int32_t *hist, int32_t *n_hist, const int32_t *t, int32_t k) {
    int32_t taken = 0;
    for (int32_t i = 0; i < k && e->n < e->budget && !e->stop; i++) {
        e->out[e->n++] = t[i];
        hist[(*n_hist)++] = t[i];
        taken++;
        if (e->stop_at_eog && e->tok && sp_tokenizer_is_eog(e->tok, t[i])) e->hit_eog = e->stop = true;
    }
    if (taken && e->cb && !e->cb(e->ud, t, taken)) e->stop = true;
    if (e->n >= e->budget) e->stop = true;
    return taken;
}

/* Passes the observer (chains only) the target rows of the tokens just
 * committed at hist[n_before..n): at most `rows` of them, p's rows 0.. */
static void observe(sp_spec *s, const int32_t *hist, int32_t n_before, int32_t n, int32_t rows) {
    if (!s->observer || s->is_tree || n <= n_before) return;
    s->obs_rows = rows < n - n_before ? rows : n - n_before;
    s->observer(s->observer_ud, hist, n_before, s->p, s->obs_rows, s->V);
    s->obs_rows = 0;
}

/* One target forward over the uncommitted tail hist[T.n_past..n) and the
 * drafted nodes; tree mask when parent != NULL. Writes p rows (adjusted)
 * for the last tail token and each node. */
static sp_status target_pass(sp_spec *s, const int32_t *hist, int32_t n, const int32_t *nodes,
                             const int32_t *parent, const int32_t *depth, int32_t n_nodes,
                             sp_sampler *smp, sp_spec_stats *st, sp_error *err) {
    const int32_t V = s->V, past = sp_ctx_n_past(s->target), tail = n - past;
    const int32_t B = tail + n_nodes;
    SP_ASSERT(tail >= 1 && B <= s->batch_cap);
    for (int32_t i = 0; i < tail; i++) {
        s->batch_tok[i] = hist[past + i];
        s->batch_pos[i] = past + i;
    }
    for (int32_t i = 0; i < n_nodes; i++) {
        s->batch_tok[tail + i] = nodes[i];
        s->batch_pos[tail + i] = n - 1 + (depth ? depth[i + 1] : i + 1);
    }
    const uint8_t *mask = NULL;
    if (parent) { /* the tail is causal; each node sees the tail and its ancestors */
        memset(s->mask, 0, (size_t)tail * (size_t)B);
        for (int32_t i = 0; i < tail; i++) memset(s->mask + (int64_t)i * B, 1, (size_t)i + 1);
        sp_tree_ancestor_mask(parent, 1, n_nodes, tail, B, s->mask + (int64_t)tail * B);
        mask = s->mask;
    }
    sp_batch b = {.tokens = s->batch_tok, .pos = s->batch_pos, .n = B, .mask = mask,
                  .logits_all = true};
    double t0 = sp_now(), cost;
    sp_status rc = target_forward(s, &b, s->logits, &cost, err);
    double t1 = sp_now();
    st->t_target += t1 - t0;
    st->target_forwards++;
    sp_adapt_observe_target(&s->adapt, B, cost);
    if (rc) return rc;
    for (int32_t j = 0; j <= n_nodes; j++)
        sp_sampler_probs(smp, s->logits + (int64_t)(tail - 1 + j) * V, s->p + (int64_t)j * V);
    s->obs_row0 = tail - 1; /* row j of p is batch row tail - 1 + j */
    st->t_sample += sp_now() - t1;
    return SP_OK;
}

/* State of one generation shared by the step functions. */
typedef struct gen_run {
    sp_spec *s;
    sp_sampler *smp;
    sp_rng rng;
    int32_t *hist, n;     /* committed text */
    bool greedy_t;        /* temperature 0 */
    sp_mc_mode mode;      /* trees: how children are drawn/verified */
    sp_spec_stats *stats;
    /* result of a step */
    int32_t emitted[SP_TREE_MAX_DEPTH + SP_SPEC_MAX_GAMMA + 2];
    int32_t n_emit, tau;
} gen_run;

/* One tree iteration: grow the draft tree (trimmed to the token budget),
 * verify it in one target pass, keep the accepted path in both caches. */
static sp_status step_tree(gen_run *g, int32_t remaining, sp_error *err) {
    sp_spec *s = g->s;
    sp_spec_stats *st = g->stats;
    int32_t depth = remaining - 1 < s->shape.depth ? remaining - 1 : s->shape.depth, nn = 1;
    double t0 = sp_now();
    sp_status rc = SP_OK;
    if (depth >= 1) {
        rc = sp_drafter_tree(s->drafter, g->hist, g->n, &s->shape, depth, g->greedy_t, g->mode,
                             g->smp, &g->rng, &s->tree, err);
        nn = s->tree.n_nodes;
    }
    st->t_draft += sp_now() - t0;
    if (rc) return rc;
    st->drafted += nn - 1;
    const int32_t past = sp_ctx_n_past(s->target);
    rc = target_pass(s, g->hist, g->n, s->tree.token + 1, nn > 1 ? s->tree.parent : NULL,
                     s->tree.depth, nn - 1, g->smp, st, err);
    if (!rc) rc = sp_drafter_target_rows(s->drafter, s->target, g->hist, g->n, past, g->n - past + nn - 1, err);
    if (rc) return rc;
    int32_t path[SP_TREE_MAX_DEPTH + 1], n_path = 0, y;
    double tv = sp_now();
    if (nn == 1) {
        y = sp_sample_from_probs(s->p, s->V, sp_rng_uniform(&g->rng));
    } else {
        sp_verify_tree vt = {.n_nodes = nn, .parent = s->tree.parent, .token = s->tree.token,
                             .p = s->p, .q = s->q};
        const bool trav = s->prm.verifier == SP_VERIFIER_GBV ||
                          s->prm.verifier == SP_VERIFIER_TRAVERSAL;
        rc = g->greedy_t ? sp_verify_tree_greedy(s->ws, &vt, path, SP_TREE_MAX_DEPTH + 1, &n_path,
                                                 &y, err)
             : trav      ? sp_verify_tree_traversal(s->ws, &vt, g->mode, &g->rng, path,
                                                    SP_TREE_MAX_DEPTH + 1, &n_path, &y, err)
                         : sp_verify_tree_walk(s->ws, &vt, g->mode, &g->rng, path,
                                               SP_TREE_MAX_DEPTH + 1, &n_path, &y, err);
    }
    st->t_verify += sp_now() - tv;
    if (rc) return rc;
    g->tau = n_path;
    g->n_emit = 0;
    for (int32_t i = 0; i < n_path; i++) g->emitted[g->n_emit++] = s->tree.token[path[i]];
    g->emitted[g->n_emit++] = y;
    /* roll back: keep the tail plus the accepted path */
    int32_t idx[SP_TREE_MAX_DEPTH + 1];
    for (int32_t i = 0; i < n_path; i++) idx[i] = path[i] - 1;
    rc = sp_ctx_keep(s->target, g->n, idx, n_path, err);
    if (!rc) rc = sp_drafter_accept_tree(s->drafter, g->n, &s->tree, path, n_path, err);
    return rc;
}

/* One chain iteration: draft up to gamma tokens, verify them in one target
 * pass, truncate both caches to the accepted prefix. */
static sp_status step_chain(gen_run *g, int32_t remaining, sp_error *err) {
    sp_spec *s = g->s;
    sp_spec_stats *st = g->stats;
    const sp_draft_counters *dc = sp_drafter_counters(s->drafter);
    double t0 = sp_now(), dsec0 = dc->seconds, dgap0 = dc->gap_seconds;
    const double t_fwd0 = st->t_target;
    int64_t dfw0 = dc->forwards, dgapf0 = dc->gap_forwards;
    if (s->prm.adaptive) sp_adapt_set_depth(&s->adapt, g->n);
    int32_t gamma = s->prm.adaptive ? sp_adapt_propose(&s->adapt, s->prm.gamma) : s->prm.gamma;
    if (gamma > remaining - 1) gamma = remaining - 1;
    int32_t nd = 0;
    sp_status rc = SP_OK;
    if (gamma >= 1)
        rc = sp_drafter_chain(s->drafter, g->hist, g->n, gamma, s->prm.draft_n_min,
                              s->prm.draft_p_min, g->smp, &g->rng, s->draft, s->q, &nd, err);
    st->t_draft += sp_now() - t0;
    if (rc) return rc;
    st->drafted += nd;
    const int32_t past = sp_ctx_n_past(s->target);
    rc = target_pass(s, g->hist, g->n, s->draft, NULL, NULL, nd, g->smp, st, err);
    if (!rc) rc = sp_drafter_target_rows(s->drafter, s->target, g->hist, g->n, past, g->n - past + nd, err);
    if (rc) return rc;
    sp_verify_result vr = {0, 0};
    double tv = sp_now();
    if (nd == 0)
        vr.token = sp_sample_from_probs(s->p, s->V, sp_rng_uniform(&g->rng));
    else if (s->prm.verifier == SP_VERIFIER_GREEDY)
        rc = sp_verify_greedy(s->ws, nd, s->draft, s->p, &vr, err);
    else
        rc = sp_verify_chain(s->ws, s->prm.verifier, s->prm.lenience, nd, s->draft, s->q, s->p,
                             &g->rng, &vr, err);
    st->t_verify += sp_now() - tv;
    if (rc) return rc;
    g->tau = vr.n_accepted;
    memcpy(g->emitted, s->draft, (size_t)g->tau * sizeof *g->emitted);
    g->n_emit = g->tau;
    g->emitted[g->n_emit++] = vr.token;
    const double t_draft_it = dc->seconds - dsec0;
    st->gamma_hist[nd < SP_SPEC_MAX_GAMMA + 1 ? nd : SP_SPEC_MAX_GAMMA + 1]++;
    /* the rest of the iteration's time (verification, sampling) */
    const double over = sp_now() - t0 - t_draft_it - (st->t_target - t_fwd0);
    const sp_adapt_step as = {
        .drafted = nd, .accepted = g->tau, .emitted = g->n_emit,
        .draft_seconds = t_draft_it, .over_seconds = over,
        .draft_forwards = (dc->forwards - dfw0) - (dc->gap_forwards - dgapf0),
        .draft_forward_seconds = (dc->seconds - dsec0) - (dc->gap_seconds - dgap0)};
    sp_adapt_observe_step(&s->adapt, &as);
    rc = sp_ctx_truncate(s->target, g->n + g->tau, err);
    if (!rc) rc = sp_drafter_accept_chain(s->drafter, g->n, g->tau, err);
    return rc;
}

/* Checks generate-time arguments against the spec object and the context. */
static sp_status check_generate(const sp_spec *s, int32_t n_prompt, const sp_gen_params *gp,
                                int32_t cap, sp_error *err) {
    sp_status st = sp_spec_config_check_sampling(&s->prm, &gp->sampling, err);
    if (st) return st;
    if (n_prompt < 1) return sp_fail(err, SP_ERR_ARG, "empty prompt (need at least one token)");
    if (gp->n_predict < 1 || gp->n_predict > cap)
        return sp_fail(err, SP_ERR_ARG, "token budget %d must be in [1, %d]", gp->n_predict, cap);
    const int32_t cached = sp_ctx_n_past(s->target);
    if (cached != 0 && !gp->keep_prefix) return sp_fail(err, SP_ERR_STATE, "context is not empty");
    if (cached >= n_prompt)
        return sp_fail(err, SP_ERR_STATE, "the context holds %d tokens, not a strict prefix of the %d-token prompt",
                       cached, n_prompt);
    const int32_t n_ctx = sp_ctx_n_ctx(s->target);
    if ((int64_t)n_prompt + gp->n_predict > n_ctx)
        return sp_fail(err, SP_ERR_RANGE,
                       "prompt (%d tokens) plus %d new tokens exceed the context size %d", n_prompt,
                       gp->n_predict, n_ctx);
    const int32_t extra = sp_spec_config_extra_ctx(&s->prm);
    if (s->is_tree && (int64_t)n_prompt + gp->n_predict + extra > n_ctx)
        return sp_fail(err, SP_ERR_RANGE,
                       "tree: %d nodes do not fit the context: prompt %d + %d new + tree > %d",
                       extra, n_prompt, gp->n_predict, n_ctx);
    return SP_OK;
}

sp_status sp_spec_generate(sp_spec *s, const int32_t *prompt, int32_t n_prompt,
                           const sp_gen_params *gp, int32_t *out, int32_t cap,
                           sp_gen_stats *gstats, sp_spec_stats *stats, sp_token_cb cb, void *ud,
                           sp_error *err) {
    sp_spec_stats st_local;
    sp_gen_stats gs_local;
    if (!stats) stats = &st_local;
    if (!gstats) gstats = &gs_local;
    memset(stats, 0, sizeof *stats);
    stats->drafter = sp_drafter_name(s->prm.draft.kind);
    stats->verifier = s->drafter ? sp_verifier_name(s->prm.verifier) : "none";
    if (!s->drafter) {
        sp_gen_params p = *gp;
        if (!p.forward) p.forward = s->forward, p.forward_ud = s->forward_ud;
        sp_status rc = sp_generate(s->target, prompt, n_prompt, &p, out, cap, gstats, cb, ud, err);
        stats->target_forwards = gstats->target_forwards;
        return rc;
    }
    *gstats = (sp_gen_stats){.n_prompt = n_prompt};
    sp_status rc = check_generate(s, n_prompt, gp, cap, err);
    if (rc) return rc;
    s->fwd = gp->forward ? gp->forward : s->forward;
    s->fwd_ud = gp->forward ? gp->forward_ud : s->forward_ud;
    /* a prompt cache: the target's first n_cached tokens are the prompt's,
     * and at least its last token is left to evaluate */
    const int32_t n_cached = sp_ctx_n_past(s->target) < n_prompt - 1 ? sp_ctx_n_past(s->target) : n_prompt - 1;
    if (n_cached < sp_ctx_n_past(s->target) && (rc = sp_ctx_truncate(s->target, n_cached, err))) return rc;
    gstats->n_cached = n_cached;
    gen_run g = {.s = s, .stats = stats, .greedy_t = gp->sampling.temperature == 0,
                 .mode = s->prm.verifier == SP_VERIFIER_MC ||
                                 s->prm.verifier == SP_VERIFIER_GBV
                             ? SP_MC_REPLACE
                         : s->prm.verifier == SP_VERIFIER_NAIVE ? SP_MC_NAIVE
                                                                : SP_MC_NOREPLACE};
    if ((rc = sp_sampler_init(&gp->sampling, s->V, &g.smp, err))) return rc;
    if ((rc = sp_sampler_set_n_valid(g.smp, sp_model_n_valid_vocab(sp_ctx_model(s->target)), err))) {
        sp_sampler_free(g.smp);
        return rc;
    }
    g.hist = malloc(((size_t)n_prompt + (size_t)gp->n_predict + 1) * sizeof *g.hist);
    if (!g.hist) {
        sp_sampler_free(g.smp);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory");
    }
    memcpy(g.hist, prompt, (size_t)n_prompt * sizeof *g.hist);
    g.n = n_prompt;
    sp_rng_seed(&g.rng, gp->seed);
    emit_state e = {.out = out, .cap = cap, .budget = gp->n_predict,
                    .tok = sp_model_tokenizer(sp_ctx_model(s->target)),
                    .stop_at_eog = gp->stop_at_eog, .cb = cb, .ud = ud};
    const int64_t dc_f0 = draft_forwards(s);

    /* a draft cache kept by sp_spec_reset_keep holds the last
     * generation's history: keep what the prompt shares with it */
    int32_t dkeep = 0;
    while (dkeep < s->n_prev && dkeep < n_prompt && s->prev[dkeep] == prompt[dkeep]) dkeep++;
    if (!rc) rc = sp_drafter_keep(s->drafter, dkeep, err);

    /* Prefill the whole prompt, as plain decoding does: its last row gives
     * the first token (the last prompt token alone in the first iteration's
     * pass cost one forward more per text, 1.5% of 64-token texts when
     * drafting loses); the draft's cache takes all but that token, which its
     * first draft catches up. */
    double t0 = sp_now();
    s->draft_stale = false;
    int32_t last_row = 0; /* the last prompt token's row in the last chunk */
    const int32_t mb = sp_ctx_max_batch(s->target);
    for (int32_t i = n_cached; !rc && i < g.n; i += mb) { /* sp_prefill's chunks, through the hook */
        sp_batch b = {.tokens = g.hist + i, .n = g.n - i < mb ? g.n - i : mb};
        double cost;
        rc = target_forward(s, &b, s->logits, &cost, err);
        if (!rc) stats->prefill_forwards++;
        if (!rc) rc = sp_drafter_target_rows(s->drafter, s->target, g.hist, g.n, i, b.n, err);
        last_row = b.n - 1;
    }
    if (!rc && g.n > 1) rc = sp_drafter_prefill(s->drafter, g.hist, g.n - 1, err);
    stats->target_forwards = stats->prefill_forwards;
    gstats->t_prefill = sp_now() - t0;
    if (!rc && gp->keep_prefix) gstats->n_pinned = sp_ctx_pin(s->target);
    double t1 = sp_now();
    if (!rc) { /* the first token, from the prefill's last row */
        sp_sampler_probs(g.smp, s->logits, s->p);
        const int32_t y0 = sp_sample_from_probs(s->p, s->V, sp_rng_uniform(&g.rng));
        const int32_t n_before = g.n;
        emit(&e, g.hist, &g.n, &y0, 1); /* not an iteration's: stats->emitted leaves it out */
        s->obs_row0 = last_row;
        observe(s, g.hist, n_before, g.n, 1);
    }
    while (!rc && !e.stop) {
        const int32_t remaining = e.budget - e.n;
        if (s->draft_stale) { /* swapped in by the observer: the whole text, new weights */
            s->draft_stale = false;
            double td = sp_now();
            rc = sp_drafter_prefill(s->drafter, g.hist, g.n - 1, err);
            stats->t_draft += sp_now() - td;
            if (rc) break;
        }
        rc = s->is_tree ? step_tree(&g, remaining, err) : step_chain(&g, remaining, err);
        if (rc) break;
        stats->iterations++;
        stats->accepted += g.tau;
        stats->accept_hist[g.tau < SP_SPEC_MAX_GAMMA + 1 ? g.tau : SP_SPEC_MAX_GAMMA + 1]++;
        const int32_t n_before = g.n;
        stats->emitted += emit(&e, g.hist, &g.n, g.emitted, g.n_emit);
        /* chain steps: target rows 0..tau are the distributions of the
         * tokens just committed at positions n_before.. (tree rows follow
         * the tree's node order and are not passed on) */
        observe(s, g.hist, n_before, g.n, g.tau + 1);
    }
    gstats->t_generate = sp_now() - t1;
    gstats->n_generated = e.n;
    gstats->hit_eog = e.hit_eog;
    gstats->target_forwards = stats->target_forwards;
    stats->draft_forwards = draft_forwards(s) - dc_f0;
    s->n_prev = 0; /* the history, for a cache kept for the next generation */
    if (!rc && g.n > s->prev_cap) {
        int32_t *p = realloc(s->prev, (size_t)g.n * sizeof *p);
        if (p) s->prev = p, s->prev_cap = g.n;
    }
    if (!rc && g.n <= s->prev_cap) memcpy(s->prev, g.hist, (size_t)g.n * sizeof *g.hist), s->n_prev = g.n;
    free(g.hist);
    sp_sampler_free(g.smp);
    return rc;
}
