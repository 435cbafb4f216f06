/* peak_bench: this core's arithmetic peaks, the yardstick for the matmul
 * kernels' rates (matmul_bench "hot" columns) when verification is
 * arithmetic-bound:
 *
 *   peak_bench [seconds]        (default 0.3 per measurement)
 *
 * - clock: a chain of dependent 64-bit adds (one cycle each on every x86
 *   core of the last decade), so GHz = adds per second;
 * - the throughput of the instructions the kernels are built on, each
 *   over 12 independent accumulators (more than latency x issue width):
 *   512-bit vpdpbusd (64 int8 multiply-adds: Q8_0/Q4_0/K-quant kernels),
 *   vfmadd231ps (16 FMAs: F32/F16 kernels) and, where the CPU has
 *   AVX512-BF16, vdpbf16ps (32 bf16 multiply-adds); and the 256-bit forms
 *   of the first two (AVX2 kernels, vpmaddubsw + vpmaddwd take their place
 *   without VNNI).
 * One thread, in the thread's CPU time (a loaded machine does not skew it);
 * the ISA-specific loops run only after the CPU check. Prints per-core
 * G multiply-adds per second and multiply-adds per cycle. */
#include <cpuid.h>
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "ops.h"
#include "clock.h"

enum { ACC = 12 };

/* OP applied to the 12 accumulators, written out: a loop over an array
 * left the accumulators in memory with gcc -O2 (half the rate). */
#define ACC12(OP) \
    do { OP(0); OP(1); OP(2); OP(3); OP(4); OP(5); OP(6); OP(7); OP(8); OP(9); OP(10); OP(11); } while (0)

/* n iterations of 16 dependent adds; returns the sum (kept live). */
static uint64_t add_chain(uint64_t n) {
    uint64_t x = 0;
    for (uint64_t i = 0; i < n; i++)
        __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                         "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                         "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                         "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                         : "+r"(x));
    return x;
}

/* Each loop: n iterations of ACC independent instructions; returns a value
 * derived from every accumulator so none is dead. The operands are opaque
 * to the compiler (volatile seeds), so it cannot fold the loop. */
static volatile int32_t g_seed_i = 0x01010101;
static volatile float g_seed_f = 1e-7f;

__attribute__((target("avx512f,avx512bw,avx512vnni"))) static double loop_dpbusd512(uint64_t n) {
    const __m512i a = _mm512_set1_epi32(g_seed_i), b = _mm512_set1_epi32(g_seed_i);
    __m512i acc[ACC];
    for (int j = 0; j < ACC; j++) acc[j] = _mm512_set1_epi32(j);
    for (uint64_t i = 0; i < n; i++) {
#define STEP(j) acc[j] = _mm512_dpbusd_epi32(acc[j], a, b)
        ACC12(STEP);
#undef STEP
    }
    int64_t s = 0;
    for (int j = 0; j < ACC; j++) s += _mm512_reduce_add_epi32(acc[j]);
    return (double)s;
}

__attribute__((target("avx2,avx512f,avx512vl,avx512vnni"))) static double loop_dpbusd256(uint64_t n) {
    const __m256i a = _mm256_set1_epi32(g_seed_i), b = _mm256_set1_epi32(g_seed_i);
    __m256i acc[ACC];
    for (int j = 0; j < ACC; j++) acc[j] = _mm256_set1_epi32(j);
    for (uint64_t i = 0; i < n; i++) {
#define STEP(j) acc[j] = _mm256_dpbusd_epi32(acc[j], a, b)
        ACC12(STEP);
#undef STEP
    }
    __m256i t = acc[0];
    for (int j = 1; j < ACC; j++) t = _mm256_add_epi32(t, acc[j]);
    int32_t v[8];
    _mm256_storeu_si256((__m256i *)v, t);
    return (double)v[0] + v[7];
}

__attribute__((target("avx512f"))) static double loop_fma512(uint64_t n) {
    const __m512 a = _mm512_set1_ps(g_seed_f), b = _mm512_set1_ps(g_seed_f);
    __m512 acc[ACC];
    for (int j = 0; j < ACC; j++) acc[j] = _mm512_set1_ps((float)j);
    for (uint64_t i = 0; i < n; i++) {
#define STEP(j) acc[j] = _mm512_fmadd_ps(a, b, acc[j])
        ACC12(STEP);
#undef STEP
    }
    double s = 0;
    for (int j = 0; j < ACC; j++) s += _mm512_reduce_add_ps(acc[j]);
    return s;
}

__attribute__((target("avx2,fma"))) static double loop_fma256(uint64_t n) {
    const __m256 a = _mm256_set1_ps(g_seed_f), b = _mm256_set1_ps(g_seed_f);
    __m256 acc[ACC];
    for (int j = 0; j < ACC; j++) acc[j] = _mm256_set1_ps((float)j);
    for (uint64_t i = 0; i < n; i++) {
#define STEP(j) acc[j] = _mm256_fmadd_ps(a, b, acc[j])
        ACC12(STEP);
#undef STEP
    }
    __m256 t = acc[0];
    for (int j = 1; j < ACC; j++) t = _mm256_add_ps(t, acc[j]);
    float v[8];
    _mm256_storeu_ps(v, t);
    return (double)v[0] + v[7];
}

__attribute__((target("avx512f,avx512bf16"))) static double loop_dpbf16(uint64_t n) {
    const __m512bh a = (__m512bh)_mm512_set1_epi32(g_seed_i), b = (__m512bh)_mm512_set1_epi32(g_seed_i);
    __m512 acc[ACC];
    for (int j = 0; j < ACC; j++) acc[j] = _mm512_set1_ps((float)j);
    for (uint64_t i = 0; i < n; i++) {
#define STEP(j) acc[j] = _mm512_dpbf16_ps(acc[j], a, b)
        ACC12(STEP);
#undef STEP
    }
    double s = 0;
    for (int j = 0; j < ACC; j++) s += _mm512_reduce_add_ps(acc[j]);
    return s;
}

static int has_avx512bf16(void) {
    unsigned a, b, c, d;
    if (__get_cpuid_max(0, NULL) < 7) return 0;
    __cpuid_count(7, 1, a, b, c, d);
    return (a >> 5) & 1;
}

/* Instructions per second of fn, run for about `secs` (iterations doubled
 * until then). */
static double rate(double (*fn)(uint64_t), double per_iter, double secs, double *sink) {
    uint64_t n = 1 << 16;
    for (;;) {
        const double t0 = sp_thread_cpu_now();
        *sink += fn(n);
        const double t = sp_thread_cpu_now() - t0;
        if (t >= secs) return per_iter * (double)n / t;
        n *= 2;
    }
}

static double chain_adds(uint64_t n) { return (double)add_chain(n); }

int main(int argc, char **argv) {
    const double secs = argc > 1 ? atof(argv[1]) : 0.3;
    if (!(secs > 0 && secs <= 10)) {
        fprintf(stderr, "peak_bench: seconds must be in (0, 10]\n");
        return 2;
    }
    const sp_isa isa = sp_ops_best_isa();
    double sink = 0;
    const double hz = rate(chain_adds, 16, secs, &sink);
    printf("clock   %.2f GHz (dependent adds per second, one thread)\n", hz * 1e-9);
    printf("%-22s %14s %12s %12s\n", "instruction", "G instr/s", "GMAC/s", "MAC/cycle");
    struct {
        const char *name;
        double (*fn)(uint64_t);
        int macs; /* multiply-adds per instruction */
        sp_isa need;
        int bf16;
    } tests[] = {
        {"vpdpbusd zmm", loop_dpbusd512, 64, SP_ISA_AVX512, 0},
        {"vpdpbusd ymm", loop_dpbusd256, 32, SP_ISA_AVX512, 0},
        {"vfmadd231ps zmm", loop_fma512, 16, SP_ISA_AVX512, 0},
        {"vfmadd231ps ymm", loop_fma256, 8, SP_ISA_AVX2, 0},
        {"vdpbf16ps zmm", loop_dpbf16, 32, SP_ISA_AVX512, 1},
    };
    for (size_t i = 0; i < sizeof tests / sizeof tests[0]; i++) {
        if (isa < tests[i].need || (tests[i].bf16 && !has_avx512bf16())) {
            printf("%-22s %14s\n", tests[i].name, "(not on this CPU)");
            continue;
        }
        const double r = rate(tests[i].fn, ACC, secs, &sink);
        printf("%-22s %14.2f %12.1f %12.1f\n", tests[i].name, r * 1e-9, r * tests[i].macs * 1e-9,
               r * tests[i].macs / hz);
    }
    if (sink == 12345.678) printf("\n"); /* keeps the results live */
    return 0;
}
