/* train_mm: the trainer's matmul loops (forward, and the two backward
 * products), compiled once per instruction set from one source
 * (train_mm_body.h) and chosen by the active ISA (sp_ops_isa). Every loop
 * is an element-wise multiply-add in a fixed order (no reductions
 * reassociated, no contraction: -ffp-contract=off), so the wider vectors
 * compute exactly the scalar build's numbers: training is bit-identical on
 * every ISA (tested). Internal to the train layer. */
#ifndef SP_TRAIN_MM_H
#define SP_TRAIN_MM_H

#include <stdint.h>

typedef struct mm_args {
    float *out;          /* forward: [n][O] */
    const float *inp;    /* [n][I] */
    const float *w;      /* [O][I] */
    const float *wt;     /* [I][O] */
    float *dinp, *dw;    /* backward: [n][I] (added to), [O][I] (added to) */
    const float *dout;   /* [n][O] */
    int64_t n, I, O;
} mm_args;


/* Thread-pool jobs over an mm_args: fwd: out = inp W^T (from wt = W^T);
 * bwd_inp: dinp += dout W; bwd_w: dW += dout^T inp. */
typedef struct sp_train_mm {
    void (*fwd)(void *arg, int ith, int nth);
    void (*bwd_inp)(void *arg, int ith, int nth);
    void (*bwd_w)(void *arg, int ith, int nth);
} sp_train_mm;

extern const sp_train_mm sp_train_mm_scalar, sp_train_mm_avx2, sp_train_mm_avx512;

/* The loops for the active ISA (after the CPU check). */
const sp_train_mm *sp_train_mm_active(void);

#endif
