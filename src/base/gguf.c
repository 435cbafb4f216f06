/* gguf: the GGUF reader (mmap, validate everything, expose views) and the
 * ggml tensor-type tables. The writer lives in gguf_write.c. */
#include "gguf.h"
#include "file.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ggml type tables ---------------------------------------------------- */

typedef struct {
    const char *name;
    int64_t blck;   /* elements per block */
    int64_t size;   /* bytes per block */
} type_info;

/* Indexed by sp_ggml_type; entries with name NULL are ids ggml has retired
 * (4, 5: old Q4_2/Q4_3; 31..33 and 36..38: repacked layouts never stored). */
static const type_info k_types[SP_GGML_TYPE_COUNT] = {
    [SP_GGML_F32] = {"f32", 1, 4},
    [SP_GGML_F16] = {"f16", 1, 2},
    [SP_GGML_Q4_0] = {"q4_0", 32, 18},
    [SP_GGML_Q4_1] = {"q4_1", 32, 20},
    [SP_GGML_Q5_0] = {"q5_0", 32, 22},
    [SP_GGML_Q5_1] = {"q5_1", 32, 24},
    [SP_GGML_Q8_0] = {"q8_0", 32, 34},
    [SP_GGML_Q8_1] = {"q8_1", 32, 36},
    [SP_GGML_Q2_K] = {"q2_K", 256, 84},
    [SP_GGML_Q3_K] = {"q3_K", 256, 110},
    [SP_GGML_Q4_K] = {"q4_K", 256, 144},
    [SP_GGML_Q5_K] = {"q5_K", 256, 176},
    [SP_GGML_Q6_K] = {"q6_K", 256, 210},
    [SP_GGML_Q8_K] = {"q8_K", 256, 292},
    [SP_GGML_IQ2_XXS] = {"iq2_xxs", 256, 66},
    [SP_GGML_IQ2_XS] = {"iq2_xs", 256, 74},
    [SP_GGML_IQ3_XXS] = {"iq3_xxs", 256, 98},
    [SP_GGML_IQ1_S] = {"iq1_s", 256, 50},
    [SP_GGML_IQ4_NL] = {"iq4_nl", 32, 18},
    [SP_GGML_IQ3_S] = {"iq3_s", 256, 110},
    [SP_GGML_IQ2_S] = {"iq2_s", 256, 82},
    [SP_GGML_IQ4_XS] = {"iq4_xs", 256, 136},
    [SP_GGML_I8] = {"i8", 1, 1},
    [SP_GGML_I16] = {"i16", 1, 2},
    [SP_GGML_I32] = {"i32", 1, 4},
    [SP_GGML_I64] = {"i64", 1, 8},
    [SP_GGML_F64] = {"f64", 1, 8},
    [SP_GGML_IQ1_M] = {"iq1_m", 256, 56},
    [SP_GGML_BF16] = {"bf16", 1, 2},
    [SP_GGML_TQ1_0] = {"tq1_0", 256, 54},
    [SP_GGML_TQ2_0] = {"tq2_0", 256, 66},
    [SP_GGML_MXFP4] = {"mxfp4", 32, 17},
};

static const type_info *type_get(sp_ggml_type t) {
    if ((int)t < 0 || (int)t >= SP_GGML_TYPE_COUNT || !k_types[t].name) return NULL;
    return &k_types[t];
}

const char *sp_ggml_type_name(sp_ggml_type t) {
    const type_info *ti = type_get(t);
    return ti ? ti->name : "unknown";
}

int64_t sp_ggml_blck_size(sp_ggml_type t) {
    const type_info *ti = type_get(t);
    return ti ? ti->blck : 0;
}

int64_t sp_ggml_type_size(sp_ggml_type t) {
    const type_info *ti = type_get(t);
    return ti ? ti->size : 0;
}

uint64_t sp_ggml_row_size(sp_ggml_type t, int64_t n) {
    const type_info *ti = type_get(t);
    SP_ASSERT(ti != NULL && n >= 0 && n % ti->blck == 0);
    return (uint64_t)(n / ti->blck) * (uint64_t)ti->size;
}

/* ---- Reader ----------------------------------------------------------------- */

#define GGUF_DEFAULT_ALIGNMENT 32
#define GGUF_MAX_ARRAY_DEPTH 8

/* Open-addressing hash of names (FNV-1a, linear probing) mapping a key or
 * tensor name to its index: duplicate checks and lookups in O(1), so a
 * crafted file with millions of records fails fast instead of spending
 * n^2/2 comparisons. slot[h] = index + 1, 0 when empty. */
typedef struct name_index {
    uint64_t *slot;
    uint64_t mask;
} name_index;

static uint64_t name_hash(const char *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull;
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

static bool name_index_init(name_index *x, uint64_t n) {
    uint64_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    x->slot = calloc((size_t)cap, sizeof *x->slot);
    x->mask = cap - 1;
    return x->slot != NULL;
}

/* Index of the name in the table, or UINT64_MAX; names(i) gives entry i. */
#define NAME_INDEX_FIND(x, NAMEOF, p, n, out)                                                 \
    do {                                                                                      \
        (out) = UINT64_MAX;                                                                   \
        for (uint64_t h_ = name_hash((p), (n)) & (x)->mask; (x)->slot[h_]; h_ = (h_ + 1) & (x)->mask) { \
            sp_str s_ = NAMEOF((x)->slot[h_] - 1);                                            \
            if (s_.len == (n) && memcmp(s_.ptr, (p), (size_t)(n)) == 0) {                     \
                (out) = (x)->slot[h_] - 1;                                                    \
                break;                                                                        \
            }                                                                                 \
        }                                                                                     \
    } while (0)

static void name_index_put(name_index *x, const char *p, uint64_t n, uint64_t i) {
    uint64_t h = name_hash(p, n) & x->mask;
    while (x->slot[h]) h = (h + 1) & x->mask;
    x->slot[h] = i + 1;
}

struct sp_gguf {
    const uint8_t *map;     /* whole file, read-only */
    uint64_t size;
    uint32_t version;
    uint64_t n_kv, n_tensors;
    sp_gguf_kv *kvs;
    sp_gguf_tensor *tensors;
    sp_str *str_tables;     /* backing store for STRING-array element tables */
    name_index key_index;   /* key -> kvs[i], tensor name -> tensors[i] */
    name_index tensor_index;
    uint64_t alignment;
    uint64_t data_start;    /* file offset of the tensor data section */
};

/* Parse cursor over the mapping; every read checks the bytes left. */
typedef struct {
    const uint8_t *p;
    uint64_t pos, size;
    const char *path;
    sp_error *err;
} cursor;

static uint64_t left(const cursor *c) { return c->size - c->pos; }

static sp_status truncated(cursor *c, const char *what) {
    return sp_fail(c->err, SP_ERR_FORMAT,
                   "truncated GGUF %s: %s runs past end of file (offset %" PRIu64 ", size %" PRIu64 ")",
                   c->path, what, c->pos, c->size);
}

static sp_status rd_bytes(cursor *c, void *dst, uint64_t n, const char *what) {
    if (left(c) < n) return truncated(c, what);
    memcpy(dst, c->p + c->pos, (size_t)n);
    c->pos += n;
    return SP_OK;
}

static sp_status rd_u32(cursor *c, uint32_t *v, const char *what) {
    uint8_t b[4] = {0};
    sp_status s = rd_bytes(c, b, 4, what);
    if (s) return s;
    *v = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
    return SP_OK;
}

static sp_status rd_u64(cursor *c, uint64_t *v, const char *what) {
    uint32_t lo, hi;
    sp_status s = rd_u32(c, &lo, what);
    if (s) return s;
    if ((s = rd_u32(c, &hi, what))) return s;
    *v = (uint64_t)hi << 32 | lo;
    return SP_OK;
}

static sp_status rd_str(cursor *c, sp_str *out, const char *what) {
    uint64_t n;
    sp_status s = rd_u64(c, &n, what);
    if (s) return s;
    if (n > left(c)) {
        return sp_fail(c->err, SP_ERR_FORMAT,
                       "truncated GGUF %s: %s has length %" PRIu64 " but only %" PRIu64
                       " bytes are left (offset %" PRIu64 ")",
                       c->path, what, n, left(c), c->pos);
    }
    out->ptr = (const char *)(c->p + c->pos);
    out->len = n;
    c->pos += n;
    return SP_OK;
}

/* Size in bytes of a fixed-size scalar value type; 0 for STRING/ARRAY, -1 if unknown. */
static int scalar_size(uint32_t t) {
    switch (t) {
    case SP_GGUF_UINT8: case SP_GGUF_INT8: case SP_GGUF_BOOL: return 1;
    case SP_GGUF_UINT16: case SP_GGUF_INT16: return 2;
    case SP_GGUF_UINT32: case SP_GGUF_INT32: case SP_GGUF_FLOAT32: return 4;
    case SP_GGUF_UINT64: case SP_GGUF_INT64: case SP_GGUF_FLOAT64: return 8;
    case SP_GGUF_STRING: case SP_GGUF_ARRAY: return 0;
    default: return -1;
    }
}

int sp_gguf_scalar_size(sp_gguf_type t) { return scalar_size((uint32_t)t); }

static uint64_t le_load(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* Decode a fixed-size scalar of type t at p into kv->v (widened). */
static void decode_scalar(sp_gguf_kv *kv, uint32_t t, const uint8_t *p) {
    switch (t) {
    case SP_GGUF_UINT8: kv->v.u64 = p[0]; break;
    case SP_GGUF_INT8: kv->v.i64 = (int8_t)p[0]; break;
    case SP_GGUF_BOOL: kv->v.b = p[0] != 0; break;
    case SP_GGUF_UINT16: kv->v.u64 = le_load(p, 2); break;
    case SP_GGUF_INT16: kv->v.i64 = (int16_t)le_load(p, 2); break;
    case SP_GGUF_UINT32: kv->v.u64 = le_load(p, 4); break;
    case SP_GGUF_INT32: kv->v.i64 = (int32_t)le_load(p, 4); break;
    case SP_GGUF_UINT64: kv->v.u64 = le_load(p, 8); break;
    case SP_GGUF_INT64: kv->v.i64 = (int64_t)le_load(p, 8); break;
    case SP_GGUF_FLOAT32: {
        uint32_t u = (uint32_t)le_load(p, 4);
        float f;
        memcpy(&f, &u, 4);
        kv->v.f64 = f;
        break;
    }
    case SP_GGUF_FLOAT64: {
        uint64_t u = le_load(p, 8);
        memcpy(&kv->v.f64, &u, 8);
        break;
    }
    default: SP_ASSERT(0);
    }
}

/* Validate and skip an array body (element type already read) of n elements,
 * recursing into nested arrays up to GGUF_MAX_ARRAY_DEPTH. */
static sp_status skip_array(cursor *c, uint32_t et, uint64_t n, int depth, const char *key) {
    int es = scalar_size(et);
    if (es < 0) {
        return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: key '%s' has array of unknown type %" PRIu32,
                       c->path, key, et);
    }
    if (es > 0) {
        if (n > left(c) / (uint64_t)es) {
            return sp_fail(c->err, SP_ERR_FORMAT,
                           "truncated GGUF %s: array '%s' of %" PRIu64 " elements runs past end of file (offset %" PRIu64 ")",
                           c->path, key, n, c->pos);
        }
        c->pos += n * (uint64_t)es;
        return SP_OK;
    }
    /* Each string is at least 8 bytes and each nested array at least 12. */
    uint64_t min_elem = et == SP_GGUF_STRING ? 8 : 12;
    if (n > left(c) / min_elem) {
        return sp_fail(c->err, SP_ERR_FORMAT,
                       "truncated GGUF %s: array '%s' of %" PRIu64 " elements runs past end of file (offset %" PRIu64 ")",
                       c->path, key, n, c->pos);
    }
    if (et == SP_GGUF_ARRAY && depth >= GGUF_MAX_ARRAY_DEPTH) {
        return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: arrays nested deeper than %d in '%s'",
                       c->path, GGUF_MAX_ARRAY_DEPTH, key);
    }
    for (uint64_t i = 0; i < n; i++) {
        sp_status s;
        if (et == SP_GGUF_STRING) {
            sp_str str;
            if ((s = rd_str(c, &str, "array string"))) return s;
        } else {
            uint32_t t2;
            uint64_t n2;
            if ((s = rd_u32(c, &t2, "nested array type"))) return s;
            if ((s = rd_u64(c, &n2, "nested array count"))) return s;
            if ((s = skip_array(c, t2, n2, depth + 1, key))) return s;
        }
    }
    return SP_OK;
}

/* Key as a printable C string for messages (truncated, into buf). */
static const char *str_c(sp_str s, char *buf, size_t cap) {
    size_t n = s.len < cap - 1 ? (size_t)s.len : cap - 1;
    memcpy(buf, s.ptr, n);
    buf[n] = 0;
    return buf;
}

static sp_status parse_kvs(sp_gguf *g, cursor *c) {
    /* A KV is at least key length (8) + type (4) + a 1-byte value. */
    if (g->n_kv > left(c) / 13) {
        return sp_fail(c->err, SP_ERR_FORMAT,
                       "bad GGUF %s: header claims %" PRIu64 " key-value pairs but only %" PRIu64 " bytes follow",
                       c->path, g->n_kv, left(c));
    }
    g->kvs = calloc(g->n_kv ? (size_t)g->n_kv : 1, sizeof *g->kvs);
    if (!g->kvs || !name_index_init(&g->key_index, g->n_kv))
        return sp_fail(c->err, SP_ERR_NOMEM, "out of memory reading GGUF %s", c->path);

    uint64_t n_str_total = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        sp_gguf_kv *kv = &g->kvs[i];
        char what[160], kb[128];
        sp_status s;
        snprintf(what, sizeof what, "key %" PRIu64, i);
        if ((s = rd_str(c, &kv->key, what))) return s;
        str_c(kv->key, kb, sizeof kb);
#define KEY_OF(j) (g->kvs[j].key)
        uint64_t dup;
        NAME_INDEX_FIND(&g->key_index, KEY_OF, kv->key.ptr, kv->key.len, dup);
        if (dup != UINT64_MAX)
            return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: duplicate key '%s'", c->path, kb);
        name_index_put(&g->key_index, kv->key.ptr, kv->key.len, i);
        uint32_t t;
        snprintf(what, sizeof what, "value of key '%s'", kb);
        if ((s = rd_u32(c, &t, what))) return s;
        int es = scalar_size(t);
        if (es < 0) {
            return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: key '%s' has unknown value type %" PRIu32,
                           c->path, kb, t);
        }
        kv->type = (sp_gguf_type)t;
        if (es > 0) {
            if (left(c) < (uint64_t)es) return truncated(c, what);
            decode_scalar(kv, t, c->p + c->pos);
            c->pos += (uint64_t)es;
        } else if (t == SP_GGUF_STRING) {
            if ((s = rd_str(c, &kv->v.str, what))) return s;
        } else {
            uint32_t et;
            if ((s = rd_u32(c, &et, what))) return s;
            if ((s = rd_u64(c, &kv->arr_n, what))) return s;
            kv->arr_type = (sp_gguf_type)et;
            kv->arr_data = c->p + c->pos;
            if ((s = skip_array(c, et, kv->arr_n, 1, kb))) return s;
            if (et == SP_GGUF_STRING) n_str_total += kv->arr_n;
        }
    }

    /* Build O(1) element tables for STRING arrays: arr_data is repointed at
     * an sp_str[arr_n] table (the array was validated above). */
    if (n_str_total) {
        g->str_tables = malloc((size_t)n_str_total * sizeof *g->str_tables);
        if (!g->str_tables) return sp_fail(c->err, SP_ERR_NOMEM, "out of memory reading GGUF %s", c->path);
        sp_str *next = g->str_tables;
        for (uint64_t i = 0; i < g->n_kv; i++) {
            sp_gguf_kv *kv = &g->kvs[i];
            if (kv->type != SP_GGUF_ARRAY || kv->arr_type != SP_GGUF_STRING) continue;
            const uint8_t *p = kv->arr_data;
            for (uint64_t j = 0; j < kv->arr_n; j++) {
                uint64_t len = le_load(p, 8);
                next[j].ptr = (const char *)p + 8;
                next[j].len = len;
                p += 8 + len;
            }
            kv->arr_data = next;
            next += kv->arr_n;
        }
    }
    return SP_OK;
}

static sp_status parse_tensor_infos(sp_gguf *g, cursor *c) {
    /* A tensor info is at least name (8) + n_dims (4) + ne (8) + type (4) + offset (8). */
    if (g->n_tensors > left(c) / 32) {
        return sp_fail(c->err, SP_ERR_FORMAT,
                       "bad GGUF %s: header claims %" PRIu64 " tensors but only %" PRIu64 " bytes follow",
                       c->path, g->n_tensors, left(c));
    }
    g->tensors = calloc(g->n_tensors ? (size_t)g->n_tensors : 1, sizeof *g->tensors);
    if (!g->tensors || !name_index_init(&g->tensor_index, g->n_tensors))
        return sp_fail(c->err, SP_ERR_NOMEM, "out of memory reading GGUF %s", c->path);

    for (uint64_t i = 0; i < g->n_tensors; i++) {
        sp_gguf_tensor *t = &g->tensors[i];
        char what[64], nb[128];
        sp_status s;
        snprintf(what, sizeof what, "tensor info %" PRIu64, i);
        if ((s = rd_str(c, &t->name, what))) return s;
        str_c(t->name, nb, sizeof nb);
#define TENSOR_OF(j) (g->tensors[j].name)
        uint64_t dup;
        NAME_INDEX_FIND(&g->tensor_index, TENSOR_OF, t->name.ptr, t->name.len, dup);
        if (dup != UINT64_MAX)
            return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: duplicate tensor name '%s'", c->path, nb);
        name_index_put(&g->tensor_index, t->name.ptr, t->name.len, i);
        if ((s = rd_u32(c, &t->n_dims, what))) return s;
        if (t->n_dims < 1 || t->n_dims > 4) {
            return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: tensor '%s' has %" PRIu32 " dimensions (want 1..4)",
                           c->path, nb, t->n_dims);
        }
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        for (uint32_t d = 0; d < t->n_dims; d++) {
            uint64_t ne;
            if ((s = rd_u64(c, &ne, what))) return s;
            if (ne > (uint64_t)INT64_MAX) {
                return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: tensor '%s' dimension %" PRIu32 " is negative",
                               c->path, nb, d);
            }
            t->ne[d] = (int64_t)ne;
        }
        uint32_t type;
        if ((s = rd_u32(c, &type, what))) return s;
        if ((s = rd_u64(c, &t->offset, what))) return s;
        const type_info *ti = type < SP_GGML_TYPE_COUNT ? type_get((sp_ggml_type)type) : NULL;
        if (!ti) {
            return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: tensor '%s' has unknown type id %" PRIu32,
                           c->path, nb, type);
        }
        t->type = (sp_ggml_type)type;
        if (t->ne[0] % ti->blck != 0) {
            return sp_fail(c->err, SP_ERR_FORMAT,
                           "bad GGUF %s: tensor '%s' row length %" PRId64 " is not a multiple of the %s block size %" PRId64,
                           c->path, nb, t->ne[0], ti->name, ti->blck);
        }
        /* nbytes = row bytes * ne1 * ne2 * ne3, refusing overflow. */
        uint64_t nbytes = (uint64_t)(t->ne[0] / ti->blck) * (uint64_t)ti->size;
        uint64_t nel = (uint64_t)t->ne[0];
        for (int d = 1; d < 4; d++) {
            uint64_t m = (uint64_t)t->ne[d];
            if (m != 0 && (nbytes > UINT64_MAX / m || nel > (uint64_t)INT64_MAX / m)) {
                return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: tensor '%s' size overflows", c->path, nb);
            }
            nbytes *= m;
            nel *= m;
        }
        t->nbytes = nbytes;
    }
    return SP_OK;
}

/* Read general.alignment if present: an integer, a power of two. */
static sp_status read_alignment(sp_gguf *g, cursor *c) {
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    const sp_gguf_kv *kv = sp_gguf_find(g, "general.alignment");
    if (!kv) return SP_OK;
    uint64_t a;
    switch (kv->type) {
    case SP_GGUF_UINT8: case SP_GGUF_UINT16: case SP_GGUF_UINT32: case SP_GGUF_UINT64:
        a = kv->v.u64;
        break;
    case SP_GGUF_INT8: case SP_GGUF_INT16: case SP_GGUF_INT32: case SP_GGUF_INT64:
        a = kv->v.i64 < 0 ? 0 : (uint64_t)kv->v.i64;
        break;
    default:
        return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: general.alignment is not an integer", c->path);
    }
    if (a == 0 || (a & (a - 1)) != 0 || a > (1u << 30)) {
        return sp_fail(c->err, SP_ERR_FORMAT, "bad GGUF %s: general.alignment %" PRIu64 " is not a power of two",
                       c->path, a);
    }
    g->alignment = a;
    return SP_OK;
}

static sp_status place_tensors(sp_gguf *g, cursor *c) {
    uint64_t a = g->alignment;
    uint64_t pos = c->pos;
    g->data_start = pos + (a - pos % a) % a;  /* pos <= file size, no overflow */
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        sp_gguf_tensor *t = &g->tensors[i];
        char nb[128];
        str_c(t->name, nb, sizeof nb);
        if (t->offset % a != 0) {
            return sp_fail(c->err, SP_ERR_FORMAT,
                           "bad GGUF %s: tensor '%s' offset %" PRIu64 " is not a multiple of the alignment %" PRIu64,
                           c->path, nb, t->offset, a);
        }
        uint64_t avail = g->data_start <= g->size ? g->size - g->data_start : 0;
        if (t->offset > avail || t->nbytes > avail - t->offset) {
            return sp_fail(c->err, SP_ERR_FORMAT,
                           "truncated GGUF %s: tensor '%s' data (offset %" PRIu64 ", %" PRIu64
                           " bytes) runs past end of file (%" PRIu64 " data bytes)",
                           c->path, nb, t->offset, t->nbytes, avail);
        }
        /* An empty tensor may sit at the very end; never point past the mapping. */
        t->data = t->nbytes ? g->map + g->data_start + t->offset : g->map + g->size;
    }
    return SP_OK;
}

static sp_status parse(sp_gguf *g, const char *path, sp_error *err) {
    cursor c = {g->map, 0, g->size, path, err};
    sp_status s;
    char magic[4];
    if ((s = rd_bytes(&c, magic, 4, "magic"))) return s;
    if (memcmp(magic, "GGUF", 4) != 0) {
        return sp_fail(err, SP_ERR_FORMAT, "%s is not a GGUF file (bad magic %02x %02x %02x %02x)", path,
                       (uint8_t)magic[0], (uint8_t)magic[1], (uint8_t)magic[2], (uint8_t)magic[3]);
    }
    if ((s = rd_u32(&c, &g->version, "version"))) return s;
    if (g->version != 2 && g->version != 3) {
        return sp_fail(err, SP_ERR_FORMAT, "unsupported GGUF version %" PRIu32 " in %s (want 2 or 3)",
                       g->version, path);
    }
    if ((s = rd_u64(&c, &g->n_tensors, "tensor count"))) return s;
    if ((s = rd_u64(&c, &g->n_kv, "key-value count"))) return s;
    if ((s = parse_kvs(g, &c))) return s;
    if ((s = read_alignment(g, &c))) return s;
    if ((s = parse_tensor_infos(g, &c))) return s;
    return place_tensors(g, &c);
}

sp_status sp_gguf_open(const char *path, sp_gguf **out, sp_error *err) {
    SP_ASSERT(path != NULL && out != NULL);
    *out = NULL;
    sp_file_map fm;
    sp_status fs = sp_file_map_open(path, "model", 0, &fm, err);
    if (fs) return fs;
    /* Smallest valid file: magic, version, two counts. */
    if (fm.size < 24) {
        sp_file_unmap(&fm);
        return sp_fail(err, SP_ERR_FORMAT, "truncated GGUF %s: %llu bytes is too small for a header",
                       path, (unsigned long long)fm.size);
    }
    sp_gguf *g = calloc(1, sizeof *g);
    if (!g) {
        sp_file_unmap(&fm);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory opening %s", path);
    }
    g->map = fm.data;
    g->size = fm.size;
    sp_status s = parse(g, path, err);
    if (s != SP_OK) {
        sp_gguf_close(g);
        return s;
    }
    *out = g;
    return SP_OK;
}

void sp_gguf_close(sp_gguf *g) {
    if (!g) return;
    sp_file_map fm = {g->map, g->size};
    sp_file_unmap(&fm);
    free(g->kvs);
    free(g->tensors);
    free(g->str_tables);
    free(g->key_index.slot);
    free(g->tensor_index.slot);
    free(g);
}

uint32_t sp_gguf_version(const sp_gguf *g) { return g->version; }
sp_file_map sp_gguf_mapping(const sp_gguf *g) { return (sp_file_map){g->map, g->size}; }
uint64_t sp_gguf_n_kv(const sp_gguf *g) { return g->n_kv; }
uint64_t sp_gguf_n_tensors(const sp_gguf *g) { return g->n_tensors; }

const sp_gguf_kv *sp_gguf_kv_at(const sp_gguf *g, uint64_t i) {
    SP_ASSERT(i < g->n_kv);
    return &g->kvs[i];
}

const sp_gguf_tensor *sp_gguf_tensor_at(const sp_gguf *g, uint64_t i) {
    SP_ASSERT(i < g->n_tensors);
    return &g->tensors[i];
}

/* Hash lookups (the indexes built while parsing). */
const sp_gguf_kv *sp_gguf_find(const sp_gguf *g, const char *key) {
    uint64_t i;
    NAME_INDEX_FIND(&g->key_index, KEY_OF, key, (uint64_t)strlen(key), i);
    return i == UINT64_MAX ? NULL : &g->kvs[i];
}

const sp_gguf_tensor *sp_gguf_find_tensor(const sp_gguf *g, const char *name) {
    uint64_t i;
    NAME_INDEX_FIND(&g->tensor_index, TENSOR_OF, name, (uint64_t)strlen(name), i);
    return i == UINT64_MAX ? NULL : &g->tensors[i];
}

sp_status sp_gguf_get_u32(const sp_gguf *g, const char *key, uint32_t *out, sp_error *err) {
    const sp_gguf_kv *kv = sp_gguf_find(g, key);
    if (!kv) return sp_fail(err, SP_ERR_FORMAT, "GGUF key '%s' is missing", key);
    switch (kv->type) {
    case SP_GGUF_UINT8: case SP_GGUF_UINT16: case SP_GGUF_UINT32: case SP_GGUF_UINT64:
        if (kv->v.u64 > UINT32_MAX) break;
        *out = (uint32_t)kv->v.u64;
        return SP_OK;
    case SP_GGUF_INT8: case SP_GGUF_INT16: case SP_GGUF_INT32: case SP_GGUF_INT64:
        if (kv->v.i64 < 0 || kv->v.i64 > (int64_t)UINT32_MAX) break;
        *out = (uint32_t)kv->v.i64;
        return SP_OK;
    default:
        return sp_fail(err, SP_ERR_FORMAT, "GGUF key '%s' is not an integer", key);
    }
    return sp_fail(err, SP_ERR_FORMAT, "GGUF key '%s' does not fit in 32 unsigned bits", key);
}

sp_status sp_gguf_get_f32(const sp_gguf *g, const char *key, float *out, sp_error *err) {
    const sp_gguf_kv *kv = sp_gguf_find(g, key);
    if (!kv) return sp_fail(err, SP_ERR_FORMAT, "GGUF key '%s' is missing", key);
    if (kv->type != SP_GGUF_FLOAT32 && kv->type != SP_GGUF_FLOAT64) {
        return sp_fail(err, SP_ERR_FORMAT, "GGUF key '%s' is not a float", key);
    }
    *out = (float)kv->v.f64;
    return SP_OK;
}

sp_status sp_gguf_get_str(const sp_gguf *g, const char *key, sp_str *out, sp_error *err) {
    const sp_gguf_kv *kv = sp_gguf_find(g, key);
    if (!kv) return sp_fail(err, SP_ERR_FORMAT, "GGUF key '%s' is missing", key);
    if (kv->type != SP_GGUF_STRING) return sp_fail(err, SP_ERR_FORMAT, "GGUF key '%s' is not a string", key);
    *out = kv->v.str;
    return SP_OK;
}

sp_str sp_gguf_arr_str(const sp_gguf_kv *kv, uint64_t i) {
    SP_ASSERT(kv->type == SP_GGUF_ARRAY && kv->arr_type == SP_GGUF_STRING && i < kv->arr_n);
    return ((const sp_str *)kv->arr_data)[i];
}

float sp_gguf_arr_f32(const sp_gguf_kv *kv, uint64_t i) {
    SP_ASSERT(kv->type == SP_GGUF_ARRAY && i < kv->arr_n);
    const uint8_t *p = kv->arr_data;
    if (kv->arr_type == SP_GGUF_FLOAT64) {
        uint64_t u = le_load(p + 8 * i, 8);
        double d;
        memcpy(&d, &u, 8);
        return (float)d;
    }
    SP_ASSERT(kv->arr_type == SP_GGUF_FLOAT32);
    uint32_t u = (uint32_t)le_load(p + 4 * i, 4);
    float f;
    memcpy(&f, &u, 4);
    return f;
}

int64_t sp_gguf_arr_int(const sp_gguf_kv *kv, uint64_t i) {
    SP_ASSERT(kv->type == SP_GGUF_ARRAY && i < kv->arr_n);
    const uint8_t *p = kv->arr_data;
    switch (kv->arr_type) {
    case SP_GGUF_UINT8: case SP_GGUF_BOOL: return p[i];
    case SP_GGUF_INT8: return (int8_t)p[i];
    case SP_GGUF_UINT16: return (int64_t)le_load(p + 2 * i, 2);
    case SP_GGUF_INT16: return (int16_t)le_load(p + 2 * i, 2);
    case SP_GGUF_UINT32: return (int64_t)le_load(p + 4 * i, 4);
    case SP_GGUF_INT32: return (int32_t)le_load(p + 4 * i, 4);
    case SP_GGUF_UINT64: case SP_GGUF_INT64: return (int64_t)le_load(p + 8 * i, 8);
    default: SP_ASSERT(0 && "not an integer array");
    }
    return 0;
}

uint64_t sp_gguf_data_offset(const sp_gguf *g) { return g->data_start; }
uint64_t sp_gguf_alignment(const sp_gguf *g) { return g->alignment; }
