/* sp_sysinfo: facts about the machine a benchmark needs to report next to
 * its figures: the CPU's name, the kernel ISA in use, and the read bandwidth
 * measured now (a multi-threaded streaming read over a buffer well beyond
 * the last-level cache), the bound batch-1 decode can reach. */
#ifndef SP_SYSINFO_H
#define SP_SYSINFO_H

#include <stddef.h>

#include "sp_status.h"

/* Name of the compute kernels in use: "scalar", "avx2" or "avx512". */
const char *sp_sysinfo_isa(void);
/* The CPU's model name (from /proc/cpuinfo), or "unknown CPU"; written into
 * buf (always NUL-terminated). */
const char *sp_sysinfo_cpu(char *buf, size_t cap);

/* Size of the last-level cache in bytes (sysfs / sysconf), 0 if unknown. */
size_t sp_sysinfo_llc_bytes(void);

/* Streaming read bandwidth in GB/s (1e9 bytes/s) with n_threads threads over
 * a buffer of `bytes` (each thread reads its own contiguous slice), the best
 * of `reps` passes after one pass that faults the pages in. Errors: bad
 * arguments, no memory. */
sp_status sp_sysinfo_read_bandwidth(int n_threads, size_t bytes, int reps, double *gb_s,
                                    sp_error *err);

#endif
