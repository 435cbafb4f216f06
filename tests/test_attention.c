/* Grouped attention's split (attention.h, sp_att_run): with fewer tasks
 * than threads the scores, softmaxes and mixes are cut over the threads by
 * slot blocks, rows and value dims; every configuration (each cache type,
 * group shapes, causal and tree masks, a sliding window, soft-capping,
 * sinks; an F16 cache through the grouped kernels, or widened with enough
 * query rows per task where the ISA has none)
 * gives the bits of the scalar kernels row by row (ops.h) on pools of 1 to 4
 * threads, with the K cache slot-major or head-major (kv.h; grown between
 * stores), and the output stays a probability mix of the values (within
 * the cache's rounding of a double computation). */
#include "testutil.h"

#include <math.h>
#include <string.h>

#include "attention.h"
#include "kv.h"
#include "ops.h"
#include "rng.h"
#include "threadpool.h"

enum { N_PAST = 700, N_CTX = 768, MAX_N = 3 };

typedef struct shape {
    int32_t n_heads, n_kv_heads, hd, n;
    bool tree, window, softcap, sinks;
} shape;

static void *alloc64(size_t b) {
    void *p = NULL;
    if (posix_memalign(&p, 64, b ? b : 64)) fail_msg("out of memory");
    return p;
}

/* One layer of N_PAST + n random K/V rows of a type; queries, output. */
static void run_shape(const shape *sh, sp_ggml_type type, sp_pool *const *pools, int n_pools) {
    const int32_t H = sh->n_heads, KVH = sh->n_kv_heads, hd = sh->hd, n = sh->n, kv_dim = KVH * hd;
    sp_kv kv, kvh; /* slot-major and head-major K */
    sp_error err = {0};
    if (sp_kv_init(&kv, 1, kv_dim, hd, N_CTX, type, type, 0, &err)) fail_msg("%s", err.msg);
    if (sp_kv_init(&kvh, 1, kv_dim, hd, N_CTX, type, type, SP_KV_K_BY_HEAD, &err)) fail_msg("%s", err.msg);
    if (sp_kv_reserve(&kv, N_PAST + n, &err)) fail_msg("%s", err.msg);
    sp_rng r;
    sp_rng_seed(&r, (uint64_t)(H * 1000 + KVH * 100 + hd + n + type));
    float *k = malloc((size_t)(N_PAST + n) * kv_dim * sizeof(float));
    float *v = malloc((size_t)(N_PAST + n) * kv_dim * sizeof(float));
    for (int64_t i = 0; i < (int64_t)(N_PAST + n) * kv_dim; i++) {
        k[i] = (float)sp_rng_normal(&r);
        v[i] = (float)sp_rng_normal(&r);
    }
    sp_kv_store(&kv, 0, 0, k, v, kv_dim, N_PAST + n);
    /* head-major: stored in two pieces around a growth (heads move) */
    sp_kv_store(&kvh, 0, 0, k, v, kv_dim, 200);
    if (sp_kv_reserve(&kvh, N_PAST + n, &err)) fail_msg("%s", err.msg);
    sp_kv_store(&kvh, 0, 200, k + 200 * kv_dim, v + 200 * kv_dim, kv_dim, N_PAST + n - 200);
    float *q = malloc((size_t)n * H * hd * sizeof(float));
    for (int64_t i = 0; i < (int64_t)n * H * hd; i++) q[i] = (float)sp_rng_normal(&r) * 0.3f;
    int32_t pos[MAX_N];
    float sinks[32];
    for (int i = 0; i < 32; i++) sinks[i] = (float)sp_rng_normal(&r);
    /* a tree over the new tokens: token t sees the cache from slot 100 on,
     * itself and, for t = 2, token 0 (not token 1) */
    const int32_t mask_base = 100, mask_w = N_PAST + n - mask_base;
    uint8_t *mask = calloc((size_t)n * mask_w, 1);
    for (int32_t t = 0; t < n; t++) {
        pos[t] = N_PAST + (t == 2 ? 1 : t);
        for (int32_t s = 0; s < N_PAST - mask_base; s++) mask[(size_t)t * mask_w + s] = s % 7 != 3;
        mask[(size_t)t * mask_w + N_PAST - mask_base + t] = 1;
        if (t == 2) mask[(size_t)t * mask_w + N_PAST - mask_base] = 1;
    }
    const int32_t rows = sp_att_rows_max(H, KVH, MAX_N, N_CTX);
    const size_t per = sp_att_scratch_bytes(rows, N_CTX, hd);
    uint8_t *scratch = alloc64(4 * per);
    const int64_t out_n = (int64_t)n * H * hd;
    float *ref = malloc((size_t)out_n * sizeof(float)), *out = malloc((size_t)out_n * sizeof(float));
    sp_att_job a = {.kv = &kv, .layer = 0, .n = n, .n_past = N_PAST, .n_heads = H, .n_kv_heads = KVH,
                    .head_dim = hd, .scale = 1.0f / sqrtf((float)hd), .q = q, .pos = pos,
                    .mask_base = sh->tree ? mask_base : 0, .mask_w = sh->tree ? mask_w : 0,
                    .mask = sh->tree ? mask : NULL, .window = sh->window ? 300 : 0,
                    .softcap = sh->softcap ? 2.5f : 0, .sinks = sh->sinks ? sinks : NULL, .out = ref,
                    .out_stride = (int64_t)H * hd, .rows_max = rows, .scratch = scratch};
    /* the reference: scalar kernels row by row over the slot-major cache */
    const sp_isa best = sp_ops_isa();
    if (sp_ops_set_isa(SP_ISA_SCALAR, &err)) fail_msg("%s", err.msg);
    sp_att_job_run(&a, 0, 1);
    if (sp_ops_set_isa(best, &err)) fail_msg("%s", err.msg);
    /* a probability mix: each output within the convex hull of the values
     * it may weigh, up to the cache's rounding */
    for (int32_t i = 0; i < out_n; i++) {
        const int32_t h = (int32_t)(i / hd % H), d = (int32_t)(i % hd), g = h / (H / KVH);
        float lo = INFINITY, hi = -INFINITY;
        for (int32_t s = 0; s < N_PAST + n; s++) {
            const float x = v[(size_t)s * kv_dim + g * hd + d];
            lo = x < lo ? x : lo;
            hi = x > hi ? x : hi;
        }
        assert_true(isfinite(ref[i]));
        assert_true(ref[i] >= lo - 0.05f && ref[i] <= hi + 0.05f);
    }
    for (int pi = 0; pi < 2 * n_pools; pi++) {
        memset(out, 0xff, (size_t)out_n * sizeof(float));
        a.out = out;
        a.kv = pi < n_pools ? &kv : &kvh;
        sp_att_run(&a, pools[pi % n_pools]);
        if (memcmp(out, ref, (size_t)out_n * sizeof(float)))
            fail_msg("%s H=%d KVH=%d hd=%d n=%d tree=%d window=%d softcap=%d sinks=%d: %d threads, %s K differ",
                     sp_ggml_type_name(type), H, KVH, hd, n, sh->tree, sh->window, sh->softcap, sh->sinks,
                     sp_pool_n_threads(pools[pi % n_pools]), pi < n_pools ? "slot-major" : "head-major");
    }
    free(ref);
    free(out);
    free(scratch);
    free(mask);
    free(q);
    free(k);
    free(v);
    sp_kv_free(&kv);
    sp_kv_free(&kvh);
}

static void test_att_split_same_bits(void **state) {
    (void)state;
    sp_pool *pools[4];
    sp_error err = {0};
    for (int i = 0; i < 4; i++)
        if (sp_pool_init(i + 1, &pools[i], &err)) fail_msg("%s", err.msg);
    const shape shapes[] = {
        {4, 1, 64, 1, false, false, false, false},  {4, 1, 64, 3, true, false, false, false},
        {8, 2, 32, 1, false, true, false, false},   {2, 2, 128, 1, false, false, true, true},
        {6, 3, 96, 2, false, false, false, false},  {4, 1, 64, 1, true, true, true, true},
        {16, 1, 128, 3, false, false, false, false}, {8, 1, 64, 1, false, true, true, false},
        {5, 1, 96, 1, false, false, false, false},  {3, 1, 32, 1, false, true, false, false},
    };
    const sp_ggml_type types[] = {SP_GGML_F32, SP_GGML_F16, SP_GGML_Q8_0};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int ti = 0; ti < 3; ti++) run_shape(&shapes[si], types[ti], pools, 4);
    for (int i = 0; i < 4; i++) sp_pool_free(pools[i]);
}

static const struct CMUnitTest tests[] = {
    cmocka_unit_test(test_att_split_same_bits),
};
SP_TEST_MAIN(tests)
