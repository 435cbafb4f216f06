/* vsim: toy Markov-chain simulator of the speculative outer loop with a
 * chi-square losslessness check, and the chi-square tail; see sp_vsim.h. */
#include "dev/sp_vsim.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sampler_internal.h"
#include "sp_rng.h"
#include "sp_sampler.h"

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
