/* vsim_testutil.h: what the verify-sim tests share (test_verify_sim,
 * test_verify_traversal). */
#ifndef SP_VSIM_TESTUTIL_H
#define SP_VSIM_TESTUTIL_H

#include "dev/sp_vsim.h"

/* Variance of the accepted length, from the simulation's histogram. */
static inline double acc_var(const sp_vsim_result *r) {
    double m2 = 0;
    for (int i = 0; i <= r->depth; i++) m2 += (double)i * i * r->accept_hist[i];
    m2 /= (double)r->trials;
    return m2 - r->mean_accepted * r->mean_accepted;
}

#endif
