/* train_mm: the baseline (SSE2 on x86-64) build of the trainer's matmul
 * loops and the choice by ISA (see train_mm.h). */
#define TRAIN_MM_NAME sp_train_mm_scalar
#include "train_mm_body.h"

#include "ops.h"

const sp_train_mm *sp_train_mm_active(void) {
    switch (sp_ops_isa()) { /* sp_ops_isa runs the CPU check first */
    case SP_ISA_AVX512: return &sp_train_mm_avx512;
    case SP_ISA_AVX2: return &sp_train_mm_avx2;
    default: return &sp_train_mm_scalar;
    }
}
