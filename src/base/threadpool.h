/* threadpool.h: running jobs on a pool (internal; creating and sharing a pool
 * is public, sp_threadpool.h). */
#ifndef SP_THREADPOOL_INTERNAL_H
#define SP_THREADPOOL_INTERNAL_H

#include "sp_threadpool.h"

/* fn(ctx, ith, nth): thread ith of nth does its share of the job. */
typedef void (*sp_pool_fn)(void *ctx, int ith, int nth);

/* Runs fn on all threads (the caller is thread 0) and returns when all are
 * done. With nth = 1 or a NULL pool it simply calls fn(ctx, 0, 1). */
void sp_pool_run(sp_pool *p, sp_pool_fn fn, void *ctx);

#endif
