/* vsim: toy Markov-chain simulator of the speculative outer loop with a
 * chi-square losslessness check, and the chi-square tail; see sp_vsim.h. */
#include "dev/sp_vsim.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sampler_internal.h"
#include "rng.h"
#include "sp_sampler.h"
#include "tree.h"

/* ---- chi-square tail ---- */

double sp_vsim_gamma_q(double a, double x) {
    if (!(a > 0.0) || !(x >= 0.0) || isinf(a)) return NAN;
    if (x == 0.0) return 1.0;
    if (isinf(x)) return 0.0;
    double lg = -x + a * log(x) - lgamma(a); /* log(x^a e^-x / Gamma(a)) */
    if (x < a + 1.0) {
        /* P(a,x) = x^a e^-x / Gamma(a+1) * sum_n x^n / ((a+1)...(a+n)) */
        double term = 1.0 / a, sum = term;
        for (int n = 1; n < 10000; n++) {
            term *= x / (a + n);
            sum += term;
            if (fabs(term) < fabs(sum) * 1e-16) break;
        }
        double P = sum * exp(lg);
        return P >= 1.0 ? 0.0 : 1.0 - P;
    }
    /* Q(a,x) = e^-x x^a / Gamma(a) * 1/(x+1-a- 1(1-a)/(x+3-a- 2(2-a)/(x+5-a- ...)))
     * evaluated with the modified Lentz method. */
    const double tiny = 1e-300;
    double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
    for (int i = 1; i < 10000; i++) {
        double an = -i * (i - a);
        b += 2.0;
        d = an * d + b;
        if (fabs(d) < tiny) d = tiny;
        c = b + an / c;
        if (fabs(c) < tiny) c = tiny;
        d = 1.0 / d;
        double del = d * c;
        h *= del;
        if (fabs(del - 1.0) < 1e-16) break;
    }
    return exp(lg) * h;
}

double sp_vsim_chi2_sf(double chi2, double dof) {
    if (!(dof > 0.0)) return 1.0;
    if (!(chi2 > 0.0)) return 1.0;
    return sp_vsim_gamma_q(0.5 * dof, 0.5 * chi2);
}

void sp_vsim_chi2_test(const int64_t *count, const double *prob, int64_t n_cells,
                       sp_vsim_chi2 *out) {
    double ptot = 0.0, chi2 = 0.0, pool_e = 0.0, min_e = INFINITY, min_o = 0.0;
    int64_t n = 0, pool_o = 0, cells = 0, impossible = 0;
    for (int64_t c = 0; c < n_cells; c++) {
        ptot += prob[c];
        n += count[c];
    }
    for (int64_t c = 0; c < n_cells; c++) {
        if (!(prob[c] > 0.0)) {
            impossible += count[c];
            continue;
        }
        double e = prob[c] / ptot * (double)n;
        int64_t o = count[c];
        if (e < 5.0) {
            pool_e += e;
            pool_o += o;
            continue;
        }
        chi2 += ((double)o - e) * ((double)o - e) / e;
        cells++;
        if (e < min_e) {
            min_e = e;
            min_o = (double)o;
        }
    }
    if (pool_e > 0.0) {
        if (pool_e < 5.0 && cells > 0) { /* merge the small pool into the smallest cell */
            chi2 -= (min_o - min_e) * (min_o - min_e) / min_e;
            double e = min_e + pool_e, o = min_o + (double)pool_o;
            chi2 += (o - e) * (o - e) / e;
        } else {
            chi2 += ((double)pool_o - pool_e) * ((double)pool_o - pool_e) / pool_e;
            cells++;
        }
    }
    *out = (sp_vsim_chi2){.chi2 = chi2, .dof = cells > 1 ? (int32_t)(cells - 1) : 0, .n = n,
                          .impossible = impossible};
    out->p_value = impossible > 0 ? 0.0 : sp_vsim_chi2_sf(chi2, out->dof);
}

/* ---- models ---- */

static sp_status model_alloc(sp_vsim_model *m, int32_t V, sp_error *err) {
    if (!m) return sp_fail(err, SP_ERR_ARG, "toy model: NULL model");
    m->n_vocab = 0;
    m->target = m->draft = NULL;
    if (V < 2 || V > SP_VSIM_MAX_VOCAB)
        return sp_fail(err, SP_ERR_ARG, "toy model: vocabulary size %d outside [2, %d]", (int)V,
                       SP_VSIM_MAX_VOCAB);
    size_t n = (size_t)(V + 1) * (size_t)V;
    m->target = malloc(n * sizeof(float));
    m->draft = malloc(n * sizeof(float));
    if (!m->target || !m->draft) {
        sp_vsim_model_free(m);
        return sp_fail(err, SP_ERR_NOMEM, "toy model: out of memory");
    }
    m->n_vocab = V;
    return SP_OK;
}

void sp_vsim_model_free(sp_vsim_model *m) {
    if (!m) return;
    free(m->target);
    free(m->draft);
    m->target = m->draft = NULL;
    m->n_vocab = 0;
}

static sp_status check_vec(const double *v, int32_t V, const char *name, sp_error *err) {
    if (!v) return sp_fail(err, SP_ERR_ARG, "toy model: NULL %s", name);
    double s = 0.0;
    for (int32_t i = 0; i < V; i++) {
        if (!isfinite(v[i]) || v[i] < 0.0)
            return sp_fail(err, SP_ERR_ARG, "toy model: %s[%d] = %g is not a probability", name,
                           (int)i, v[i]);
        s += v[i];
    }
    if (fabs(s - 1.0) > SP_VERIFY_SUM_TOL)
        return sp_fail(err, SP_ERR_ARG, "toy model: %s sums to %g, not 1 (tolerance %g)", name, s,
                       SP_VERIFY_SUM_TOL);
    return SP_OK;
}

sp_status sp_vsim_model_context_free(sp_vsim_model *m, int32_t V, const double *p, const double *q,
                                     sp_error *err) {
    sp_status st = check_vec(p, V, "p", err);
    if (!st) st = check_vec(q, V, "q", err);
    if (!st) st = model_alloc(m, V, err);
    if (st) return st;
    double sp = 0.0, sq = 0.0;
    for (int32_t i = 0; i < V; i++) {
        sp += p[i];
        sq += q[i];
    }
    for (int32_t r = 0; r <= V; r++)
        for (int32_t i = 0; i < V; i++) {
            m->target[(size_t)r * V + i] = (float)(p[i] / sp);
            m->draft[(size_t)r * V + i] = (float)(q[i] / sq);
        }
    return SP_OK;
}

static void normalise_row(float *row, const double *w, int32_t V) {
    double s = 0.0;
    for (int32_t i = 0; i < V; i++) s += w[i];
    for (int32_t i = 0; i < V; i++) row[i] = (float)(w[i] / s);
}

sp_status sp_vsim_model_markov(sp_vsim_model *m, int32_t V, uint64_t seed, sp_error *err) {
    sp_status st = model_alloc(m, V, err);
    if (st) return st;
    double *w = malloc(sizeof(double) * (size_t)V);
    if (!w) {
        sp_vsim_model_free(m);
        return sp_fail(err, SP_ERR_NOMEM, "toy model: out of memory");
    }
    sp_rng rt, rd;
    sp_rng_seed(&rt, seed);
    sp_rng_seed(&rd, seed ^ 0xD1B54A32D192ED03ull);
    for (int32_t r = 0; r <= V; r++) {
        float *tr = m->target + (size_t)r * V, *dr = m->draft + (size_t)r * V;
        /* Dirichlet(1) draw squared: peaked but with full support */
        for (int32_t i = 0; i < V; i++) {
            double e = -log(1.0 - sp_rng_uniform(&rt));
            w[i] = e * e + 1e-3;
        }
        normalise_row(tr, w, V);
        for (int32_t i = 0; i < V; i++) w[i] = (double)tr[i] * exp(sp_rng_normal(&rd));
        normalise_row(dr, w, V);
    }
    free(w);
    return SP_OK;
}

static void temper_row(float *row, int32_t V, double T) {
    int32_t am = 0;
    for (int32_t i = 1; i < V; i++)
        if (row[i] > row[am]) am = i;
    if (T == 0.0) {
        for (int32_t i = 0; i < V; i++) row[i] = i == am ? 1.0f : 0.0f;
        return;
    }
    double lmax = log((double)row[am]), s = 0.0;
    for (int32_t i = 0; i < V; i++) s += row[i] > 0.0f ? exp((log((double)row[i]) - lmax) / T) : 0.0;
    for (int32_t i = 0; i < V; i++)
        row[i] = row[i] > 0.0f ? (float)(exp((log((double)row[i]) - lmax) / T) / s) : 0.0f;
}

sp_status sp_vsim_model_temperature(sp_vsim_model *m, double T, sp_error *err) {
    if (!m || !m->target) return sp_fail(err, SP_ERR_ARG, "toy model: not initialised");
    if (!isfinite(T) || T < 0.0)
        return sp_fail(err, SP_ERR_ARG, "toy model: temperature %g must be finite and >= 0", T);
    if (T == 1.0) return SP_OK;
    const int32_t V = m->n_vocab;
    for (int32_t r = 0; r <= V; r++) {
        temper_row(m->target + (size_t)r * V, V, T);
        temper_row(m->draft + (size_t)r * V, V, T);
    }
    return SP_OK;
}

/* ---- simulation ---- */

sp_vsim_params sp_vsim_default_params(void) {
    sp_vsim_params p = {SP_VERIFIER_TOKEN, 1.0, 4, 2, NULL, 10000, 1};
    return p;
}

static int32_t draw(const float *row, int32_t V, sp_rng *rng) {
    return sp_sample_from_probs(row, V, sp_rng_uniform(rng));
}

/* Draw from row with the tokens in excl[0..n_excl) removed; -1 (and no
 * uniform consumed) if nothing is left. */
static int32_t draw_excl(const float *row, int32_t V, const int32_t *excl, int32_t n_excl,
                         double *tmp, sp_rng *rng) {
    double tot = 0.0;
    for (int32_t i = 0; i < V; i++) tmp[i] = (double)row[i];
    for (int32_t j = 0; j < n_excl; j++) tmp[excl[j]] = 0.0;
    for (int32_t i = 0; i < V; i++) tot += tmp[i];
    if (!(tot > 0.0)) return -1;
    return sp_sample_from_weights(tmp, V, sp_rng_uniform(rng));
}

/* Everything one simulation holds, sized once. */
typedef struct sim {
    const sp_vsim_model *m;
    const sp_vsim_params *prm;
    int32_t V, D;          /* vocabulary, drafted positions per trial */
    int32_t L;             /* tokens compared per trial */
    int64_t n_cells;       /* V^L */
    bool is_tree;
    sp_mc_mode mode;       /* tree verifiers: how children are drawn and verified */
    sp_tree_shape shape;   /* tree verifiers */
    sp_verify_ws *ws;
    sp_rng rng;
    float *p, *q;          /* [max_nodes * V] */
    int32_t *parent, *token, *depth, *draft, *path, *seq;
    double *tmp;           /* [V] */
    int64_t *count;        /* [n_cells] */
    double *prob;          /* [n_cells] */
    double *rowsum;        /* [V + 1] */
} sim;

static void sim_free(sim *b) {
    sp_verify_ws_free(b->ws);
    free(b->p);
    free(b->q);
    free(b->parent);
    free(b->token);
    free(b->depth);
    free(b->draft);
    free(b->path);
    free(b->seq);
    free(b->tmp);
    free(b->count);
    free(b->prob);
    free(b->rowsum);
}

/* Checks the parameters and derives the depth (and the tree shape). */
static sp_status sim_params(sim *b, sp_error *err) {
    const sp_vsim_params *prm = b->prm;
    const sp_verifier vf = prm->verifier;
    if ((unsigned)vf > SP_VERIFIER_TRAVERSAL)
        return sp_fail(err, SP_ERR_ARG, "verify-sim: bad verifier");
    b->is_tree = vf == SP_VERIFIER_MC || vf == SP_VERIFIER_MC_NOREP || vf == SP_VERIFIER_NAIVE ||
                 vf == SP_VERIFIER_GBV || vf == SP_VERIFIER_TRAVERSAL;
    b->mode = vf == SP_VERIFIER_MC || vf == SP_VERIFIER_GBV             ? SP_MC_REPLACE
              : vf == SP_VERIFIER_MC_NOREP || vf == SP_VERIFIER_TRAVERSAL ? SP_MC_NOREPLACE
                                                                           : SP_MC_NAIVE;
    if (prm->trials < 1 || prm->trials > SP_VSIM_MAX_TRIALS)
        return sp_fail(err, SP_ERR_ARG, "verify-sim: trials %lld outside [1, %lld]",
                       (long long)prm->trials, SP_VSIM_MAX_TRIALS);
    if (vf == SP_VERIFIER_LENIENT && !(prm->lenience > 0.0 && prm->lenience <= 1.0))
        return sp_fail(err, SP_ERR_ARG, "verify-sim: lenience %g outside (0, 1]", prm->lenience);
    if (!b->is_tree) {
        if (prm->tree)
            return sp_fail(err, SP_ERR_ARG,
                           "verify-sim: a tree needs mc, mc-norep, naive, gbv or traversal");
        if (prm->gamma < 1 || prm->gamma > SP_VERIFY_MAX_GAMMA)
            return sp_fail(err, SP_ERR_ARG, "verify-sim: gamma %d outside [1, %d]", (int)prm->gamma,
                           SP_VERIFY_MAX_GAMMA);
        b->D = prm->gamma;
        return SP_OK;
    }
    if (prm->tree) {
        if (prm->tree->dyn_k)
            return sp_fail(err, SP_ERR_ARG, "verify-sim: a dynamic tree is grown by a draft model; give a fixed shape");
        b->shape = *prm->tree;
    } else {
        if (prm->gamma < 1 || prm->gamma > SP_TREE_MAX_DEPTH)
            return sp_fail(err, SP_ERR_ARG, "verify-sim: gamma %d outside [1, %d]", (int)prm->gamma,
                           SP_TREE_MAX_DEPTH);
        if (prm->candidates < 1 || (int64_t)prm->candidates * prm->gamma + 1 > SP_TREE_MAX_NODES)
            return sp_fail(err, SP_ERR_ARG,
                           "verify-sim: candidates %d x gamma %d exceeds the tree budget %d",
                           (int)prm->candidates, (int)prm->gamma, SP_TREE_MAX_NODES - 1);
        /* K candidates at the first position, each continued by a chain */
        int32_t branch[SP_TREE_MAX_DEPTH];
        branch[0] = prm->candidates;
        for (int32_t d = 1; d < prm->gamma; d++) branch[d] = 1;
        sp_status st = sp_tree_shape_make(branch, prm->gamma, &b->shape, err);
        if (st) return st;
    }
    if (b->shape.depth < 1 || b->shape.depth > SP_TREE_MAX_DEPTH ||
        b->shape.n_nodes > SP_TREE_MAX_NODES)
        return sp_fail(err, SP_ERR_ARG, "verify-sim: invalid tree shape");
    b->D = b->shape.depth;
    return SP_OK;
}

/* Cells (the longest prefix length L <= D+1 with V^L <= SP_VSIM_MAX_CELLS),
 * buffers and the workspace. */
static sp_status sim_alloc(sim *b, sp_error *err) {
    const int32_t V = b->V, D = b->D, max_nodes = b->is_tree ? b->shape.n_nodes : D + 1;
    b->L = 0;
    b->n_cells = 1;
    while (b->L < D + 1 && b->n_cells * V <= SP_VSIM_MAX_CELLS) {
        b->n_cells *= V;
        b->L++;
    }
    size_t rows = (size_t)max_nodes * V;
    b->p = malloc(rows * sizeof(float));
    b->q = malloc(rows * sizeof(float));
    b->parent = malloc(sizeof(int32_t) * (size_t)max_nodes);
    b->token = malloc(sizeof(int32_t) * (size_t)max_nodes);
    b->depth = malloc(sizeof(int32_t) * (size_t)max_nodes);
    b->draft = malloc(sizeof(int32_t) * (size_t)(D + 1));
    b->path = malloc(sizeof(int32_t) * (size_t)(D + 1));
    b->seq = malloc(sizeof(int32_t) * (size_t)(D + 2));
    b->tmp = malloc(sizeof(double) * (size_t)V);
    b->count = calloc((size_t)b->n_cells, sizeof(int64_t));
    b->prob = malloc(sizeof(double) * (size_t)b->n_cells);
    b->rowsum = malloc(sizeof(double) * (size_t)(V + 1));
    if (!b->p || !b->q || !b->parent || !b->token || !b->depth || !b->draft || !b->path || !b->seq ||
        !b->tmp || !b->count || !b->prob || !b->rowsum)
        return sp_fail(err, SP_ERR_NOMEM, "verify-sim: out of memory");
    return sp_verify_ws_init(V, &b->ws, err);
}

/* Exact target probability of every length-L sequence (big-endian index),
 * from the target rows renormalised in double. */
static void sim_cell_probs(sim *b) {
    const int32_t V = b->V;
    const float *T = b->m->target;
    for (int32_t r = 0; r <= V; r++) {
        double s = 0.0;
        for (int32_t i = 0; i < V; i++) s += (double)T[(size_t)r * V + i];
        b->rowsum[r] = s;
    }
    for (int64_t c = 0; c < b->n_cells; c++) {
        int64_t x = c, div = b->n_cells / V;
        int32_t ctx = V;
        double pr = 1.0;
        for (int32_t j = 0; j < b->L; j++) {
            int32_t t = (int32_t)(x / div);
            x %= div;
            div /= V;
            pr *= (double)T[(size_t)ctx * V + t] / b->rowsum[ctx];
            ctx = t;
        }
        b->prob[c] = pr;
    }
}

/* One chain trial: draft X_1..X_D from the draft chain, verify against the
 * target chain; the emitted tokens go to seq. Returns tau via *acc. */
static sp_status sim_chain_trial(sim *b, int32_t *acc, int32_t *n_emit, sp_error *err) {
    const int32_t V = b->V, D = b->D;
    const size_t row = sizeof(float) * (size_t)V;
    int32_t ctx = V;
    for (int32_t i = 0; i < D; i++) {
        memcpy(b->q + (size_t)i * V, b->m->draft + (size_t)ctx * V, row);
        memcpy(b->p + (size_t)i * V, b->m->target + (size_t)ctx * V, row);
        b->draft[i] = draw(b->q + (size_t)i * V, V, &b->rng);
        ctx = b->draft[i];
    }
    memcpy(b->p + (size_t)D * V, b->m->target + (size_t)ctx * V, row);
    sp_verify_result r;
    sp_status st = sp_verify_chain(b->ws, b->prm->verifier, b->prm->lenience, D, b->draft, b->q, b->p,
                                   &b->rng, &r, err);
    if (st) return st;
    *acc = r.n_accepted;
    for (int32_t i = 0; i < r.n_accepted; i++) b->seq[(*n_emit)++] = b->draft[i];
    b->seq[(*n_emit)++] = r.token;
    return SP_OK;
}

/* One tree trial: grow the tree breadth-first (node i's context is its
 * token; the root's is the empty context), verify it; the emitted tokens go
 * to seq. */
static sp_status sim_tree_trial(sim *b, int32_t *acc, int32_t *n_emit, sp_error *err) {
    const int32_t V = b->V;
    const size_t row = sizeof(float) * (size_t)V;
    int32_t n = 1;
    b->parent[0] = -1;
    b->token[0] = -1;
    b->depth[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        int32_t ctx = i == 0 ? V : b->token[i];
        memcpy(b->p + (size_t)i * V, b->m->target + (size_t)ctx * V, row);
        memcpy(b->q + (size_t)i * V, b->m->draft + (size_t)ctx * V, row);
        if (b->depth[i] >= b->D) continue;
        int32_t k = b->shape.branch[b->depth[i]], first = n;
        for (int32_t j = 0; j < k; j++) {
            int32_t t = b->mode == SP_MC_NOREPLACE
                            ? draw_excl(b->q + (size_t)i * V, V, b->token + first, n - first, b->tmp,
                                        &b->rng)
                            : draw(b->q + (size_t)i * V, V, &b->rng);
            if (t < 0) break; /* support exhausted */
            SP_ASSERT(n < b->shape.n_nodes);
            b->parent[n] = i;
            b->token[n] = t;
            b->depth[n] = b->depth[i] + 1;
            n++;
        }
    }
    sp_verify_tree t = {n, b->parent, b->token, b->p, b->q};
    int32_t y;
    const sp_verifier vf = b->prm->verifier;
    sp_status st = vf == SP_VERIFIER_GBV || vf == SP_VERIFIER_TRAVERSAL
                       ? sp_verify_tree_traversal(b->ws, &t, b->mode, &b->rng, b->path, b->D + 1,
                                                  acc, &y, err)
                       : sp_verify_tree_walk(b->ws, &t, b->mode, &b->rng, b->path, b->D + 1, acc,
                                             &y, err);
    if (st) return st;
    for (int32_t i = 0; i < *acc; i++) b->seq[(*n_emit)++] = b->token[b->path[i]];
    b->seq[(*n_emit)++] = y;
    return SP_OK;
}

sp_status sp_vsim_run(const sp_vsim_model *m, const sp_vsim_params *prm, sp_vsim_result *res,
                      sp_error *err) {
    if (!m || !m->target || !prm || !res) return sp_fail(err, SP_ERR_ARG, "verify-sim: NULL argument");
    memset(res, 0, sizeof *res);
    sim b = {.m = m, .prm = prm, .V = m->n_vocab};
    sp_status st = sim_params(&b, err);
    if (!st) st = sim_alloc(&b, err);
    if (st) {
        sim_free(&b);
        return st;
    }
    res->depth = b.D;
    res->check_len = b.L;
    res->exact = b.L == b.D + 1;
    res->n_cells = b.n_cells;
    res->trials = prm->trials;
    sim_cell_probs(&b);
    sp_rng_seed(&b.rng, prm->seed);
    int64_t sum_acc = 0;
    for (int64_t trial = 0; !st && trial < prm->trials; trial++) {
        int32_t n_emit = 0, acc = 0;
        st = b.is_tree ? sim_tree_trial(&b, &acc, &n_emit, err)
                       : sim_chain_trial(&b, &acc, &n_emit, err);
        if (st) break;
        sum_acc += acc;
        res->accept_hist[acc]++;
        /* continue with target samples up to L tokens, then count the cell */
        while (n_emit < b.L) {
            int32_t ctx = b.seq[n_emit - 1];
            b.seq[n_emit] = draw(m->target + (size_t)ctx * b.V, b.V, &b.rng);
            n_emit++;
        }
        int64_t cell = 0;
        for (int32_t j = 0; j < b.L; j++) cell = cell * b.V + b.seq[j];
        b.count[cell]++;
    }
    if (!st) {
        res->mean_accepted = (double)sum_acc / (double)prm->trials;
        res->block_efficiency = res->mean_accepted + 1.0;
        sp_vsim_chi2 c2;
        sp_vsim_chi2_test(b.count, b.prob, b.n_cells, &c2);
        res->chi2 = c2.chi2;
        res->dof = c2.dof;
        res->p_value = c2.p_value;
        res->impossible = c2.impossible;
    }
    sim_free(&b);
    return st;
}

/* ---- exact expectation (sp_vsim_exact) ----
 * Drafts are enumerated depth-first with their probabilities; for each, the
 * verifier's expected accepted length is computed by following its branches
 * with their probabilities. Rows are the model's floats read as doubles,
 * exactly as the verifiers read them. */

typedef struct xenum {
    const sp_vsim_model *m;
    sp_verifier vf;
    sp_mc_mode mode;
    int32_t V, D, n;          /* vocabulary, depth, nodes so far */
    const sp_tree_shape *shape;
    int32_t *parent, *token, *depth;
    double sum;               /* sum over drafts of P(draft) E[tau | draft] */
    /* traversal scratch: (n_max + 1) states of n_max x V rows Mb and Ms,
     * n_max acceptance weights and child cursors */
    int32_t n_max;
    double *st_mb, *st_ms, *st_a;
    int32_t *st_cur, *st_set, *kid_first, *kid_next; /* st_set: a[node] is current */
} xenum;

static const float *xrow(const xenum *e, const float *tab, int32_t node) {
    const int32_t ctx = node == 0 ? e->V : e->token[node];
    return tab + (size_t)ctx * e->V;
}

/* Token and block verification of the chain in e (nodes 1..D). */
static double x_chain(const xenum *e) {
    const int32_t V = e->V, D = e->D;
    if (e->vf == SP_VERIFIER_TOKEN) {
        double E = 0, reach = 1;
        for (int32_t i = 1; i <= D; i++) {
            const float *p = xrow(e, e->m->target, i - 1), *q = xrow(e, e->m->draft, i - 1);
            const int32_t x = e->token[i];
            double a = (double)p[x] / (double)q[x];
            reach *= a < 1 ? a : 1;
            E += reach;
        }
        return E;
    }
    /* block: step i stops with probability h_i = w_i / (w_i + 1 - pacc_i)
     * (an empty step rejects); tau is the last step that stopped, 0 if none */
    double h[SP_VERIFY_MAX_GAMMA + 1], pacc = 1;
    for (int32_t i = 0; i <= D; i++) {
        const float *p = xrow(e, e->m->target, i), *q = i < D ? xrow(e, e->m->draft, i) : NULL;
        double w = 0;
        for (int32_t y = 0; y < V; y++) {
            double d = pacc * (double)p[y] - (q ? (double)q[y] : 0.0);
            w += d > 0 ? d : 0;
        }
        const double tot = w + (1 - pacc);
        h[i] = tot > 0 ? w / tot : 0;
        if (i < D) {
            const int32_t x = e->token[i + 1];
            double r = pacc * (double)p[x] / (double)q[x];
            pacc = r < 1 ? r : 1;
        }
    }
    double E = 0, none_later = 1;
    for (int32_t i = D; i >= 1; i--) {
        E += i * h[i] * none_later;
        none_later *= 1 - h[i];
    }
    return E;
}

/* Multi-candidate walk from node v: expected accepted nodes below v. */
static double x_mc(const xenum *e, int32_t v) {
    const int32_t V = e->V;
    const float *p = xrow(e, e->m->target, v), *q = xrow(e, e->m->draft, v);
    double pc[SP_VSIM_MAX_VOCAB], qc[SP_VSIM_MAX_VOCAB], S = 0, Q = 0, E = 0, reach = 1;
    for (int32_t y = 0; y < V; y++) {
        pc[y] = p[y];
        qc[y] = q[y];
        S += pc[y];
        Q += qc[y];
    }
    for (int32_t c = v + 1; c < e->n; c++) {
        if (e->parent[c] != v) continue;
        const int32_t x = e->token[c];
        const double qx = e->mode == SP_MC_NOREPLACE ? qc[x] / Q : (double)q[x];
        double a = pc[x] / (qx * S);
        a = a < 1 ? a : 1;
        E += reach * a * (1 + x_mc(e, c));
        reach *= 1 - a;
        const double f = e->mode == SP_MC_NOREPLACE ? S / Q : S;
        double S2 = 0;
        for (int32_t y = 0; y < V; y++) {
            double d = pc[y] - f * (e->mode == SP_MC_NOREPLACE ? qc[y] : (double)q[y]);
            S2 += d > 0 ? d : 0;
        }
        if (S2 > 1e-12 * S) {
            for (int32_t y = 0; y < V; y++) {
                double d = pc[y] - f * (e->mode == SP_MC_NOREPLACE ? qc[y] : (double)q[y]);
                pc[y] = d > 0 ? d : 0;
            }
            S = S2;
        }
        if (e->mode == SP_MC_NOREPLACE) {
            qc[x] = 0;
            Q = 0;
            for (int32_t y = 0; y < V; y++) Q += qc[y];
        }
    }
    return E;
}

/* Traversal from state level L (rows of every node: Mb, Ms normalised,
 * weights a, child cursors): expected accepted length. */
static double x_trav(xenum *e, int32_t L) {
    const int32_t V = e->V;
    const size_t NS = (size_t)e->n_max * V;
    double *mb = e->st_mb + L * NS, *ms = e->st_ms + L * NS, *a = e->st_a + (size_t)L * e->n_max;
    int32_t *cur = e->st_cur + (size_t)L * e->n_max, *set = e->st_set + (size_t)L * e->n_max;
    /* descend along first remaining children; a node's weight is computed
     * when first reached, then changed only by its residual updates */
    int32_t v = 0;
    while (cur[v] >= 0) {
        const int32_t c = cur[v], x = e->token[c];
        if (!set[c]) {
            double r = a[v] * mb[(size_t)v * V + x] / ms[(size_t)v * V + x];
            a[c] = r < 1 ? r : 1;
            set[c] = 1;
        }
        v = c;
    }
    if (v == 0) return 0;
    double E = a[v] * e->depth[v];
    if (a[v] >= 1) return E;
    /* reject v: the next state is a copy with v's parent residualised */
    double *mb2 = mb + NS, *ms2 = ms + NS, *a2 = a + e->n_max;
    int32_t *cur2 = cur + e->n_max, *set2 = set + e->n_max;
    memcpy(set2, set, sizeof(int32_t) * (size_t)e->n_max);
    memcpy(mb2, mb, sizeof(double) * NS);
    memcpy(ms2, ms, sizeof(double) * NS);
    memcpy(a2, a, sizeof(double) * (size_t)e->n_max);
    memcpy(cur2, cur, sizeof(int32_t) * (size_t)e->n_max);
    const int32_t u = e->parent[v], x = e->token[v];
    double *bu = mb2 + (size_t)u * V, *su = ms2 + (size_t)u * V;
    double nb = 0, den = 0;
    for (int32_t y = 0; y < V; y++) {
        double d = a2[u] * bu[y] - su[y];
        if (d > 0) nb += d;
        else den -= d;
    }
    if (nb > 1e-12) {
        for (int32_t y = 0; y < V; y++) {
            double d = a2[u] * bu[y] - su[y];
            bu[y] = d > 0 ? d / nb : 0;
        }
    }
    a2[u] = den > 0 ? (nb / den < 1 ? nb / den : 1) : 1;
    if (e->mode == SP_MC_NOREPLACE) {
        double Q = 0;
        su[x] = 0;
        for (int32_t y = 0; y < V; y++) Q += su[y];
        for (int32_t y = 0; y < V && Q > 0; y++) su[y] /= Q;
    }
    cur2[u] = e->kid_next[v];
    return E + (1 - a[v]) * x_trav(e, L + 1);
}

static double x_verify(xenum *e) {
    if (e->vf == SP_VERIFIER_TOKEN || e->vf == SP_VERIFIER_BLOCK) return x_chain(e);
    if (e->vf == SP_VERIFIER_MC || e->vf == SP_VERIFIER_MC_NOREP) return x_mc(e, 0);
    /* traversal: the first state */
    const int32_t V = e->V, n = e->n;
    for (int32_t i = 0; i < n; i++) e->kid_first[i] = e->kid_next[i] = -1;
    for (int32_t i = n - 1; i >= 1; i--) {
        e->kid_next[i] = e->kid_first[e->parent[i]];
        e->kid_first[e->parent[i]] = i;
    }
    for (int32_t i = 0; i < n; i++) {
        const float *p = xrow(e, e->m->target, i), *q = xrow(e, e->m->draft, i);
        double Q = 0;
        for (int32_t y = 0; y < V; y++) Q += q[y];
        for (int32_t y = 0; y < V; y++) {
            e->st_mb[(size_t)i * V + y] = p[y];
            e->st_ms[(size_t)i * V + y] = q[y] / Q;
        }
        e->st_cur[i] = e->kid_first[i];
        e->st_set[i] = i == 0;
    }
    e->st_a[0] = 1;
    return x_trav(e, 0);
}

static void x_grow(xenum *e, int32_t i, double pr);

/* Draw the j-th..k-th children of node i (mass: remaining draft mass
 * without replacement). */
static void x_kids(xenum *e, int32_t i, int32_t j, int32_t k, double pr) {
    if (j == k) {
        x_grow(e, i + 1, pr);
        return;
    }
    const float *q = xrow(e, e->m->draft, i);
    const int32_t first = e->n - j;
    double rem = 0;
    for (int32_t y = 0; y < e->V; y++) {
        bool used = false;
        for (int32_t c = first; c < e->n && e->mode == SP_MC_NOREPLACE; c++) used |= e->token[c] == y;
        if (!used) rem += q[y];
    }
    if (!(rem > 0)) { /* support exhausted: fewer children */
        x_grow(e, i + 1, pr);
        return;
    }
    for (int32_t y = 0; y < e->V; y++) {
        bool used = false;
        for (int32_t c = first; c < e->n && e->mode == SP_MC_NOREPLACE; c++) used |= e->token[c] == y;
        if (used || !(q[y] > 0)) continue;
        const double pq = e->mode == SP_MC_NOREPLACE ? q[y] / rem : (double)q[y];
        const int32_t c = e->n++;
        e->parent[c] = i;
        e->token[c] = y;
        e->depth[c] = e->depth[i] + 1;
        x_kids(e, i, j + 1, k, pr * pq);
        e->n--;
    }
}

/* Expand node i and the ones after it (breadth-first order). */
static void x_grow(xenum *e, int32_t i, double pr) {
    if (i == e->n) {
        e->sum += pr * x_verify(e);
        return;
    }
    if (e->depth[i] >= e->D) {
        x_grow(e, i + 1, pr);
        return;
    }
    x_kids(e, i, 0, e->shape->branch[e->depth[i]], pr);
}

sp_status sp_vsim_exact(const sp_vsim_model *m, const sp_vsim_params *prm, double *mean_accepted,
                        sp_error *err) {
    if (!m || !m->target || !prm || !mean_accepted)
        return sp_fail(err, SP_ERR_ARG, "verify-sim: NULL argument");
    sim b = {.m = m, .prm = prm, .V = m->n_vocab};
    sp_status st = sim_params(&b, err);
    if (st) return st;
    const sp_verifier vf = prm->verifier;
    if (vf != SP_VERIFIER_TOKEN && vf != SP_VERIFIER_BLOCK && vf != SP_VERIFIER_MC &&
        vf != SP_VERIFIER_MC_NOREP && vf != SP_VERIFIER_GBV && vf != SP_VERIFIER_TRAVERSAL)
        return sp_fail(err, SP_ERR_UNSUPPORTED, "verify-sim: no exact expectation for %s",
                       sp_verifier_name(vf));
    sp_tree_shape chain;
    if (!b.is_tree) { /* a chain is the tree 1x1x...x1 */
        int32_t br[SP_TREE_MAX_DEPTH];
        for (int32_t d = 0; d < b.D; d++) br[d] = 1;
        if ((st = sp_tree_shape_make(br, b.D, &chain, err))) return st;
    }
    const sp_tree_shape *shape = b.is_tree ? &b.shape : &chain;
    double count = 1;
    for (int32_t i = 1; i < shape->n_nodes; i++) count *= b.V;
    if (count > SP_VSIM_MAX_EXACT)
        return sp_fail(err, SP_ERR_RANGE, "verify-sim: exact needs %.3g drafts, above %d", count,
                       SP_VSIM_MAX_EXACT);
    const int32_t N = shape->n_nodes;
    xenum e = {.m = m, .vf = vf, .mode = b.is_tree ? b.mode : SP_MC_REPLACE, .V = b.V, .D = b.D,
               .n = 1, .shape = shape, .n_max = N};
    e.parent = malloc(sizeof(int32_t) * (size_t)N);
    e.token = malloc(sizeof(int32_t) * (size_t)N);
    e.depth = malloc(sizeof(int32_t) * (size_t)N);
    e.kid_first = malloc(sizeof(int32_t) * (size_t)N);
    e.kid_next = malloc(sizeof(int32_t) * (size_t)N);
    e.st_mb = malloc(sizeof(double) * (size_t)(N + 1) * N * b.V);
    e.st_ms = malloc(sizeof(double) * (size_t)(N + 1) * N * b.V);
    e.st_a = malloc(sizeof(double) * (size_t)(N + 1) * N);
    e.st_cur = malloc(sizeof(int32_t) * (size_t)(N + 1) * N);
    e.st_set = malloc(sizeof(int32_t) * (size_t)(N + 1) * N);
    if (!e.parent || !e.token || !e.depth || !e.kid_first || !e.kid_next || !e.st_mb || !e.st_ms ||
        !e.st_a || !e.st_cur || !e.st_set) {
        st = sp_fail(err, SP_ERR_NOMEM, "verify-sim: out of memory");
    } else {
        e.parent[0] = -1;
        e.token[0] = -1;
        e.depth[0] = 0;
        x_grow(&e, 0, 1.0);
        *mean_accepted = e.sum;
    }
    free(e.parent);
    free(e.token);
    free(e.depth);
    free(e.kid_first);
    free(e.kid_next);
    free(e.st_mb);
    free(e.st_ms);
    free(e.st_a);
    free(e.st_cur);
    free(e.st_set);
    return st;
}
