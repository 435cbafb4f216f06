/* batch: continuous batching (sp_batch.h): the forwards threads hand in
 * wait in a queue; one of the waiting threads runs them together with
 * sp_forward_multi and hands each its logits and its share of the cost. */
#include "sp_batch.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"

#define FIT_DECAY 0.99 /* weight of the past in the pass-time fit, per pass */

/* One forward waiting for the shared pass; it lives on the waiting
 * caller's stack. */
typedef struct bjob {
    sp_ctx *ctx;
    sp_batch b;             /* its arrays belong to the waiting caller */
    float *logits;          /* out: (b.logits_all ? b.n : 1) rows of n_vocab floats */
    double cost;            /* out: seconds of the pass charged to it */
    bool spec;              /* tag 1 (for the statistics) */
    sp_status st;
    sp_error err;
    bool done;
    struct bjob *next;
} bjob;

struct sp_batcher {
    pthread_mutex_t mu;
    pthread_cond_t cv;      /* work arrived, a sequence left, a pass finished */
    bjob *head, *tail;      /* jobs waiting for a pass */
    int32_t n_pending, n_active; /* active: sequences decoding now (sp_batch_join) */
    bool running;           /* a pass is running */
    double last_pass;       /* seconds the last pass took */
    int32_t max_rows;       /* tokens per pass */
    int32_t n_vocab;
    float *logits;          /* [max_rows][n_vocab] */
    /* the pass being run (only by the combiner, while running) */
    sp_ctx *ctxs[SP_FORWARD_MAX_SEQS];
    sp_batch batches[SP_FORWARD_MAX_SEQS];
    bjob *jobs[SP_FORWARD_MAX_SEQS];
    uint64_t steps, rows, tokens, spec_seqs, spec_tokens, spec_shared;
    double fw, fx, fy, fxx, fxy; /* decayed sums of 1, R, T, R^2, R T over passes */
    double fit_a, fit_b;    /* the current fit T = a + b R (seconds; 0 before one exists) */
};

sp_status sp_batch_init(const sp_model *m, int32_t max_rows, sp_batcher **out, sp_error *err) {
    *out = NULL;
    if (max_rows < 1) return sp_fail(err, SP_ERR_ARG, "batch: max_rows %d must be at least 1", max_rows);
    sp_batcher *B = calloc(1, sizeof *B);
    const int32_t V = sp_model_cfg(m)->n_vocab;
    if (B) B->logits = malloc((size_t)max_rows * (size_t)V * sizeof(float));
    if (!B || !B->logits) {
        free(B);
        return sp_fail(err, SP_ERR_NOMEM, "batch: out of memory for %d rows of logits", max_rows);
    }
    pthread_mutex_init(&B->mu, NULL);
    pthread_cond_init(&B->cv, NULL);
    B->max_rows = max_rows;
    B->n_vocab = V;
    *out = B;
    return SP_OK;
}

void sp_batch_free(sp_batcher *B) {
    if (!B) return;
    pthread_cond_destroy(&B->cv);
    pthread_mutex_destroy(&B->mu);
    free(B->logits);
    free(B);
}

#define FIT_DECAY 0.99 /* weight of the past in the pass-time fit, per pass */

/* Updates the pass-time fit with a pass of R rows that took T seconds and
 * returns the per-row cost b to charge this pass with (see above). Under B->mu. */
static double fit_pass(sp_batcher *B, int32_t R, double T) {
    B->fw = FIT_DECAY * B->fw + 1;
    B->fx = FIT_DECAY * B->fx + R;
    B->fy = FIT_DECAY * B->fy + T;
    B->fxx = FIT_DECAY * B->fxx + (double)R * R;
    B->fxy = FIT_DECAY * B->fxy + R * T;
    const double mx = B->fx / B->fw, var = B->fxx / B->fw - mx * mx;
    double b = T / R;
    if (var > 0.25) { /* batch sizes spread by at least about one row */
        B->fit_b = (B->fxy / B->fw - mx * (B->fy / B->fw)) / var;
        B->fit_a = B->fy / B->fw - B->fit_b * mx;
        b = B->fit_b < 0 ? 0 : B->fit_b < T / R ? B->fit_b : T / R;
    }
    return b;
}

/* Rows of logits a batch returns. */
static int32_t out_rows(const sp_batch *b) { return b->logits_all ? b->n : 1; }

/* Runs one pass over the waiting jobs (called with B->mu held, by the
 * combiner; unlocks it during the forward): takes jobs in arrival order
 * while their tokens fit one pass, evaluates them with sp_forward_multi,
 * hands each its logits and cost, marks them done and wakes the waiters. */
static void run_pass(sp_batcher *B) {
    sp_ctx **ctxs = B->ctxs;
    sp_batch *batches = B->batches;
    bjob **jobs = B->jobs;
    const int32_t V = B->n_vocab;
    int32_t k = 0, rows = 0;
    bjob **pp = &B->head, *prev = NULL;
    while (*pp && k < SP_FORWARD_MAX_SEQS) {
        bjob *j = *pp;
        if (k > 0 && rows + j->b.n > B->max_rows) {
            prev = j;
            pp = &j->next;
            continue;
        }
        *pp = j->next;
        if (B->tail == j) B->tail = prev;
        B->n_pending--;
        jobs[k] = j;
        ctxs[k] = j->ctx;
        batches[k] = j->b;
        rows += j->b.n;
        k++;
    }
    B->running = true;
    pthread_mutex_unlock(&B->mu);
    sp_error err = {0};
    const double t0 = sp_now();
    sp_status st = sp_forward_multi(ctxs, batches, k, B->logits, &err);
    const double T = sp_now() - t0;
    const bool alone = st && st != SP_ERR_NUMERIC && k > 1;
    for (int32_t i = 0, off = 0; i < k; off += out_rows(&batches[i]), i++) {
        if (alone) { /* one sequence's bad batch failed the pass before any
                      * cache changed: run each alone, so only it fails */
            jobs[i]->st = sp_forward(ctxs[i], &batches[i], jobs[i]->logits, &jobs[i]->err);
            continue;
        }
        jobs[i]->st = st;
        if (st) jobs[i]->err = err;
        else memcpy(jobs[i]->logits, B->logits + (size_t)off * V,
                    (size_t)out_rows(&batches[i]) * (size_t)V * sizeof(float));
    }
    pthread_mutex_lock(&B->mu);
    B->last_pass = T;
    const double b = st ? 0 : fit_pass(B, rows, T);
    B->steps++;
    B->rows += (uint64_t)k;
    B->tokens += (uint64_t)rows;
    for (int32_t i = 0; i < k; i++) {
        jobs[i]->cost = alone ? -1 : (T - b * rows) / k + b * batches[i].n;
        if (jobs[i]->spec) B->spec_seqs++, B->spec_tokens += (uint64_t)batches[i].n, B->spec_shared += k > 1;
        jobs[i]->done = true;
    }
    B->running = false;
    pthread_cond_broadcast(&B->cv);
}

/* Flat combining: there
 * is no batcher thread; a caller whose job is waiting and finds no pass
 * running runs the next pass itself, for every waiting job, once every
 * active request has handed in its forward, or once it has waited half
 * as long as the last pass took (20 us to 1 ms): a straggler (a slow
 * client reading its stream, a request still drafting) must not stall the
 * others for long. The last request to hand in runs the pass at once, so
 * a full batch costs no thread hand-off. */
sp_status sp_batch_submit(sp_batcher *B, sp_ctx *ctx, const sp_batch *b, int tag, float *logits, double *cost,
                          sp_error *err) {
    bjob j = {.ctx = ctx, .b = *b, .logits = logits, .spec = tag == 1};
    pthread_mutex_lock(&B->mu);
    if (B->tail) B->tail->next = &j;
    else B->head = &j;
    B->tail = &j;
    B->n_pending++;
    /* half the last pass, clamped to [20 us, 1 ms] before the conversion */
    const double half = B->last_pass * 0.5e9;
    const long wait_ns = !(half >= 20000) ? 20000 : half > 1000000 ? 1000000 : (long)half;
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_nsec += wait_ns;
    if (dl.tv_nsec >= 1000000000L) dl.tv_sec++, dl.tv_nsec -= 1000000000L;
    bool waited = false;
    pthread_cond_broadcast(&B->cv); /* a waiting combiner may now have everyone */
    while (!j.done) {
        if (!B->running && (waited || B->n_pending >= B->n_active)) run_pass(B);
        else if (B->running) pthread_cond_wait(&B->cv, &B->mu);
        else waited = pthread_cond_timedwait(&B->cv, &B->mu, &dl) != 0;
    }
    pthread_mutex_unlock(&B->mu);
    if (j.st && err) *err = j.err;
    if (cost) *cost = j.cost;
    return j.st;
}

sp_status sp_batch_forward(void *ud, sp_ctx *c, const sp_batch *batch, float *logits, double *cost,
                           sp_error *err) {
    return sp_batch_submit(ud, c, batch, 0, logits, cost, err);
}

void sp_batch_join(sp_batcher *B, int delta) {
    pthread_mutex_lock(&B->mu);
    B->n_active += delta;
    SP_ASSERT(B->n_active >= 0);
    pthread_cond_broadcast(&B->cv); /* fewer to wait for: a waiting job may go now */
    pthread_mutex_unlock(&B->mu);
}

sp_batch_stats sp_batch_get_stats(sp_batcher *B) {
    pthread_mutex_lock(&B->mu);
    sp_batch_stats s = {.passes = B->steps, .seqs = B->rows, .tokens = B->tokens, .spec_seqs = B->spec_seqs,
                        .spec_tokens = B->spec_tokens, .spec_shared = B->spec_shared, .fit_a = B->fit_a,
                        .fit_b = B->fit_b};
    pthread_mutex_unlock(&B->mu);
    return s;
}
