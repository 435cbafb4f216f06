/* train_mm_avx512: the trainer's matmul loops built for AVX-512 (see train_mm.h). */
#define TRAIN_MM_NAME sp_train_mm_avx512
#include "train_mm_body.h"
