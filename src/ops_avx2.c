/* ops_avx2: AVX2+FMA matmul kernels (placeholder table: kernels not yet
 * written fall back to the scalar reference in ops.c). */
#include "ops.h"

void sp_ops_fill_avx2(sp_ops_table *t) { (void)t; }
