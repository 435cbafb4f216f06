/* train_mm_avx2: the trainer's matmul loops built for AVX2 (see train_mm.h). */
#define TRAIN_MM_NAME sp_train_mm_avx2
#include "train_mm_body.h"
