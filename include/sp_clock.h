/* sp_clock: the one wall clock every timing in Specula reads (statistics,
 * the bench harness, micro-benchmarks). */
#ifndef SP_CLOCK_H
#define SP_CLOCK_H

/* Seconds on CLOCK_MONOTONIC from an arbitrary origin: only differences
 * mean anything (elapsed wall time, unaffected by clock adjustments). */
double sp_now(void);

#endif
