/* threadpool: spin-then-sleep worker pool (see threadpool.h). */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define SP_PAUSE() _mm_pause()
#else
#define SP_PAUSE() ((void)0)
#endif

/* Spin this many iterations for a new job before sleeping (~50-100 us). */
#define SPIN_LIMIT 20000

typedef struct worker {
    struct sp_pool *pool;
    int ith;
    pthread_t thread;
} worker;

struct sp_pool {
    int n_threads;
    worker *workers;
    sp_pool_fn fn;
    void *ctx;
    atomic_uint generation; /* bumped once per job */
    atomic_int pending;     /* workers still running the current job */
    atomic_int sleepers;
    atomic_bool stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_mutex_t run_mu; /* one job at a time: callers on several threads take turns */
};

static void *worker_main(void *arg) {
    worker *w = arg;
    struct sp_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&p->generation, memory_order_acquire)) == seen) {
            if (atomic_load_explicit(&p->stop, memory_order_acquire)) return NULL;
            if (++spins < SPIN_LIMIT) {
                SP_PAUSE();
                continue;
            }
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (atomic_load(&p->generation) == seen && !atomic_load(&p->stop))
                pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
            spins = 0;
        }
        seen = g;
        p->fn(p->ctx, w->ith, p->n_threads);
        atomic_fetch_sub_explicit(&p->pending, 1, memory_order_release);
    }
}

sp_status sp_pool_init(int n_threads, sp_pool **out, sp_error *err) {
    *out = NULL;
    if (n_threads < 1 || n_threads > 256)
        return sp_fail(err, SP_ERR_ARG, "thread count must be in [1, 256], got %d", n_threads);
    struct sp_pool *p = calloc(1, sizeof *p);
    if (!p) return sp_fail(err, SP_ERR_NOMEM, "out of memory for thread pool");
    p->n_threads = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    pthread_mutex_init(&p->run_mu, NULL);
    p->workers = calloc((size_t)n_threads, sizeof *p->workers);
    if (!p->workers) {
        sp_pool_free(p);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory for thread pool");
    }
    for (int i = 1; i < n_threads; i++) {
        p->workers[i].pool = p;
        p->workers[i].ith = i;
        if (pthread_create(&p->workers[i].thread, NULL, worker_main, &p->workers[i])) {
            p->n_threads = i; /* only join those started */
            sp_pool_free(p);
            return sp_fail(err, SP_ERR_NOMEM, "cannot start worker thread %d", i);
        }
    }
    *out = p;
    return SP_OK;
}

void sp_pool_free(sp_pool *p) {
    if (!p) return;
    atomic_store(&p->stop, true);
    pthread_mutex_lock(&p->mu);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 1; i < p->n_threads; i++) pthread_join(p->workers[i].thread, NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->run_mu);
    free(p->workers);
    free(p);
}

int sp_pool_n_threads(const sp_pool *p) { return p ? p->n_threads : 1; }

void sp_pool_run(sp_pool *p, sp_pool_fn fn, void *ctx) {
    if (!p || p->n_threads == 1) {
        fn(ctx, 0, 1);
        return;
    }
    pthread_mutex_lock(&p->run_mu);
    p->fn = fn;
    p->ctx = ctx;
    atomic_store_explicit(&p->pending, p->n_threads - 1, memory_order_relaxed);
    /* seq_cst pairs with the sleepers increment in worker_main (Dekker-style):
     * either the worker sees the new generation or we see it sleeping. */
    atomic_fetch_add(&p->generation, 1);
    if (atomic_load(&p->sleepers) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    fn(ctx, 0, p->n_threads);
    while (atomic_load_explicit(&p->pending, memory_order_acquire) > 0) SP_PAUSE();
    pthread_mutex_unlock(&p->run_mu);
}
