/* sp_quant: the GGUF/ggml weight formats Specula computes with, bit-exact.
 *
 *   F16   IEEE half, BF16 bfloat16 (upper half of an f32)
 *   Q8_0  blocks of 32: f16 scale d, int8 qs[32];       x = d * qs[i]
 *   Q4_0  blocks of 32: f16 scale d, uint8 qs[16];      x = d * (nibble - 8),
 *         element i < 16 in the low nibble of qs[i], element i+16 in the high nibble.
 * Quantisation follows ggml's reference rounding so files we write load in
 * llama.cpp with the same values. */
#ifndef SP_QUANT_H
#define SP_QUANT_H

#include <stdint.h>

#include "sp_gguf.h"

#define SP_QK 32

typedef struct {
    uint16_t d;
    int8_t qs[SP_QK];
} sp_block_q8_0;

typedef struct {
    uint16_t d;
    uint8_t qs[SP_QK / 2];
} sp_block_q4_0;

_Static_assert(sizeof(sp_block_q8_0) == 34, "q8_0 block layout");
_Static_assert(sizeof(sp_block_q4_0) == 18, "q4_0 block layout");

float sp_fp16_to_fp32(uint16_t h);
uint16_t sp_fp32_to_fp16(float f);      /* round to nearest even */
float sp_bf16_to_fp32(uint16_t h);
uint16_t sp_fp32_to_bf16(float f);      /* round to nearest even */

/* True for the types the engine computes with. */
int sp_quant_supported(sp_ggml_type t);
/* Convert n floats (n multiple of the block size) to `type`; dst holds
 * sp_ggml_row_size(type, n) bytes. */
void sp_quantize_row(sp_ggml_type type, const float *src, void *dst, int64_t n);
/* Convert n elements of `type` back to floats. */
void sp_dequantize_row(sp_ggml_type type, const void *src, float *dst, int64_t n);

#endif
