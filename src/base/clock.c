/* clock: the monotonic wall clock behind sp_now (see sp_clock.h). */
#include "sp_clock.h"

#include <time.h>

double sp_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
