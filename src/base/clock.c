/* clock: the monotonic wall clock behind sp_now and the thread CPU clock
 * behind sp_thread_cpu_now (see clock.h). */
#include "clock.h"

#include <time.h>

static double seconds(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double sp_now(void) { return seconds(CLOCK_MONOTONIC); }
double sp_thread_cpu_now(void) { return seconds(CLOCK_THREAD_CPUTIME_ID); }
