/* rng.h: small, seeded, reproducible random number generator
 * (xoshiro256** seeded through splitmix64). Every stochastic component takes
 * an sp_rng* explicitly so results are reproducible and testable. */
#ifndef SP_RNG_H
#define SP_RNG_H

#include <stdint.h>

typedef struct sp_rng {
    uint64_t s[4];
} sp_rng;

void sp_rng_seed(sp_rng *r, uint64_t seed);
uint64_t sp_rng_u64(sp_rng *r);
/* Uniform double in [0, 1) with 53 random bits. */
double sp_rng_uniform(sp_rng *r);
/* Uniform integer in [0, n) without modulo bias; n > 0. */
uint64_t sp_rng_below(sp_rng *r, uint64_t n);
/* Standard normal (Box-Muller). */
double sp_rng_normal(sp_rng *r);

#endif
