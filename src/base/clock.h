/* clock.h: the one wall clock every timing in Specula reads (statistics,
 * the bench harness, micro-benchmarks), and the calling thread's CPU clock
 * for the micro-benchmarks' A/B runs on a shared machine. */
#ifndef SP_CLOCK_H
#define SP_CLOCK_H

/* Seconds on CLOCK_MONOTONIC from an arbitrary origin: only differences
 * mean anything (elapsed wall time, unaffected by clock adjustments). */
double sp_now(void);

/* Seconds of CPU time the calling thread has used (CLOCK_THREAD_CPUTIME_ID):
 * time spent descheduled does not count (stalls on memory still do). */
double sp_thread_cpu_now(void);

#endif
