/* threadpool.h: a set of worker threads contexts compute on (give several
 * contexts one pool through sp_ctx_params.pool), and running jobs on them:
 * a pool runs one parallel job at a time; contexts used from several threads
 * may share a pool, their jobs then take turns (a mutex per job). Dispatch is a spin-then-sleep handshake on an atomic generation
 * counter, so a job costs a few microseconds, not a condition-variable
 * round trip (decode of a small model issues thousands of jobs a second). */
#ifndef SP_THREADPOOL_H
#define SP_THREADPOOL_H

#include <stdint.h>

#include "sp_status.h"

typedef struct sp_pool sp_pool;

/* n_threads >= 1 counts the calling thread: n_threads - 1 workers start. */
sp_status sp_pool_init(int n_threads, sp_pool **out, sp_error *err);
void sp_pool_free(sp_pool *p);
int sp_pool_n_threads(const sp_pool *p);

/* fn(ctx, ith, nth): thread ith of nth does its share of the job. */
typedef void (*sp_pool_fn)(void *ctx, int ith, int nth);

/* Runs fn on all threads (the caller is thread 0) and returns when all are
 * done. With nth = 1 or a NULL pool it simply calls fn(ctx, 0, 1). */
void sp_pool_run(sp_pool *p, sp_pool_fn fn, void *ctx);

#endif
