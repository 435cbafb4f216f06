/* gguf_write: build a GGUF v3 file in memory-light form (KVs serialised as
 * they are set, tensors copied or borrowed) and write it atomically, laid out
 * the way ggml's own writer does so llama.cpp loads it: alignment 32, tensor
 * data contiguous in insertion order, each tensor padded to the alignment. */
#include "gguf.h"
#include "gguf_write.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define WRITE_ALIGNMENT 32
#define GGML_MAX_NAME 64   /* llama.cpp refuses tensor names this long or longer */

/* Growable byte buffer; `oom` sticks once an allocation fails. */
typedef struct {
    uint8_t *b;
    size_t n, cap;
    bool oom;
} bbuf;

static void bb_put(bbuf *o, const void *p, size_t n) {
    if (o->oom) return;
    if (o->n + n > o->cap) {
        size_t cap = o->cap ? o->cap : 64;
        while (cap < o->n + n) cap *= 2;
        uint8_t *nb = realloc(o->b, cap);
        if (!nb) {
            o->oom = true;
            return;
        }
        o->b = nb;
        o->cap = cap;
    }
    if (n) memcpy(o->b + o->n, p, n);
    o->n += n;
}

/* Little-endian integer of `size` bytes. */
static void bb_le(bbuf *o, uint64_t v, int size) {
    uint8_t b[8];
    for (int i = 0; i < size; i++) b[i] = (uint8_t)(v >> (8 * i));
    bb_put(o, b, (size_t)size);
}

static void bb_str(bbuf *o, const char *s, uint64_t len) {
    bb_le(o, len, 8);
    bb_put(o, s, (size_t)len);
}

typedef struct {
    char *key;
    uint32_t type;
    bbuf val;        /* the serialised value that follows the type field */
} wkv;

typedef struct {
    char *name;
    sp_ggml_type type;
    uint32_t n_dims;
    int64_t ne[4];
    uint64_t nbytes;
    const void *data;
    void *owned;     /* copy of data, or NULL when borrowed */
} wtensor;

struct sp_gguf_writer {
    wkv *kvs;
    size_t n_kv, cap_kv;
    wtensor *ts;
    size_t n_t, cap_t;
    bool oom;        /* a setter failed to allocate; write() reports it */
};

sp_gguf_writer *sp_gguf_writer_init(void) {
    return calloc(1, sizeof(sp_gguf_writer));
}

void sp_gguf_writer_free(sp_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) {
        free(w->kvs[i].key);
        free(w->kvs[i].val.b);
    }
    for (size_t i = 0; i < w->n_t; i++) {
        free(w->ts[i].name);
        free(w->ts[i].owned);
    }
    free(w->kvs);
    free(w->ts);
    free(w);
}

/* Store key -> (type, serialised value); takes ownership of val. A key set
 * twice keeps its first position and the latest value. */
static void set_kv(sp_gguf_writer *w, const char *key, uint32_t type, bbuf val) {
    SP_ASSERT(w != NULL && key != NULL);
    if (val.oom) {
        free(val.b);
        w->oom = true;
        return;
    }
    for (size_t i = 0; i < w->n_kv; i++) {
        if (strcmp(w->kvs[i].key, key) == 0) {
            free(w->kvs[i].val.b);
            w->kvs[i].type = type;
            w->kvs[i].val = val;
            return;
        }
    }
    if (w->n_kv == w->cap_kv) {
        size_t cap = w->cap_kv ? w->cap_kv * 2 : 16;
        wkv *nk = realloc(w->kvs, cap * sizeof *nk);
        if (!nk) {
            free(val.b);
            w->oom = true;
            return;
        }
        w->kvs = nk;
        w->cap_kv = cap;
    }
    char *k = strdup(key);
    if (!k) {
        free(val.b);
        w->oom = true;
        return;
    }
    w->kvs[w->n_kv++] = (wkv){k, type, val};
}

/* Bytes of one fixed-size GGUF scalar type; 0 for STRING/ARRAY/unknown
 * (the reader's table). */
static int fixed_size(sp_gguf_type t) {
    int n = sp_gguf_scalar_size(t);
    return n > 0 ? n : 0;
}

/* Append n native-endian fixed-size values of type t as little-endian. */
static void put_fixed(bbuf *o, sp_gguf_type t, const void *v, uint64_t n) {
    int es = fixed_size(t);
    const uint8_t *p = v;
    for (uint64_t i = 0; i < n; i++, p += es) {
        uint64_t x = 0;
        switch (es) {
        case 1: x = *p; break;
        case 2: { uint16_t y; memcpy(&y, p, 2); x = y; break; }
        case 4: { uint32_t y; memcpy(&y, p, 4); x = y; break; }
        case 8: memcpy(&x, p, 8); break;
        }
        if (t == SP_GGUF_BOOL) x = x != 0;
        bb_le(o, x, es);
    }
}

void sp_gguf_writer_set_scalar(sp_gguf_writer *w, const char *key, sp_gguf_type type, const void *v) {
    SP_ASSERT(fixed_size(type) > 0 && v != NULL);
    bbuf o = {0};
    put_fixed(&o, type, v, 1);
    set_kv(w, key, type, o);
}

void sp_gguf_writer_set_u32(sp_gguf_writer *w, const char *key, uint32_t v) {
    sp_gguf_writer_set_scalar(w, key, SP_GGUF_UINT32, &v);
}
void sp_gguf_writer_set_i32(sp_gguf_writer *w, const char *key, int32_t v) {
    sp_gguf_writer_set_scalar(w, key, SP_GGUF_INT32, &v);
}
void sp_gguf_writer_set_f32(sp_gguf_writer *w, const char *key, float v) {
    sp_gguf_writer_set_scalar(w, key, SP_GGUF_FLOAT32, &v);
}
void sp_gguf_writer_set_bool(sp_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v;
    sp_gguf_writer_set_scalar(w, key, SP_GGUF_BOOL, &b);
}

void sp_gguf_writer_set_str(sp_gguf_writer *w, const char *key, const char *v) {
    SP_ASSERT(v != NULL);
    bbuf o = {0};
    bb_str(&o, v, strlen(v));
    set_kv(w, key, SP_GGUF_STRING, o);
}

void sp_gguf_writer_set_arr(sp_gguf_writer *w, const char *key, sp_gguf_type elem_type, const void *v,
                            uint64_t n) {
    SP_ASSERT(fixed_size(elem_type) > 0 && (v != NULL || n == 0));
    bbuf o = {0};
    bb_le(&o, elem_type, 4);
    bb_le(&o, n, 8);
    put_fixed(&o, elem_type, v, n);
    set_kv(w, key, SP_GGUF_ARRAY, o);
}

void sp_gguf_writer_set_arr_str(sp_gguf_writer *w, const char *key, const sp_str *v, uint64_t n) {
    SP_ASSERT(v != NULL || n == 0);
    bbuf o = {0};
    bb_le(&o, SP_GGUF_STRING, 4);
    bb_le(&o, n, 8);
    for (uint64_t i = 0; i < n; i++) bb_str(&o, v[i].ptr, v[i].len);
    set_kv(w, key, SP_GGUF_ARRAY, o);
}

void sp_gguf_writer_set_arr_f32(sp_gguf_writer *w, const char *key, const float *v, uint64_t n) {
    sp_gguf_writer_set_arr(w, key, SP_GGUF_FLOAT32, v, n);
}

void sp_gguf_writer_set_arr_i32(sp_gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
    sp_gguf_writer_set_arr(w, key, SP_GGUF_INT32, v, n);
}

sp_status sp_gguf_writer_add_tensor(sp_gguf_writer *w, const char *name, sp_ggml_type type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    bool borrow, sp_error *err) {
    SP_ASSERT(w != NULL && name != NULL && ne != NULL);
    size_t name_len = strlen(name);
    if (name_len == 0 || name_len >= GGML_MAX_NAME) {
        return sp_fail(err, SP_ERR_ARG, "tensor name '%s' must be 1..%d bytes", name, GGML_MAX_NAME - 1);
    }
    int64_t blck = sp_ggml_blck_size(type);
    if (blck == 0) return sp_fail(err, SP_ERR_ARG, "tensor '%s': unknown type id %d", name, (int)type);
    if (n_dims < 1 || n_dims > 4) {
        return sp_fail(err, SP_ERR_ARG, "tensor '%s': %" PRIu32 " dimensions (want 1..4)", name, n_dims);
    }
    wtensor t = {.type = type, .n_dims = n_dims, .ne = {1, 1, 1, 1}};
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0) return sp_fail(err, SP_ERR_ARG, "tensor '%s': negative dimension %" PRIu32, name, d);
        t.ne[d] = ne[d];
    }
    if (t.ne[0] % blck != 0) {
        return sp_fail(err, SP_ERR_ARG, "tensor '%s': row length %" PRId64 " is not a multiple of the %s block %" PRId64,
                       name, t.ne[0], sp_ggml_type_name(type), blck);
    }
    uint64_t nbytes = sp_ggml_row_size(type, t.ne[0]);
    for (int d = 1; d < 4; d++) {
        uint64_t m = (uint64_t)t.ne[d];
        if (m && nbytes > (UINT64_MAX / 2) / m) return sp_fail(err, SP_ERR_ARG, "tensor '%s': size overflows", name);
        nbytes *= m;
    }
    if (nbytes > 0 && data == NULL) return sp_fail(err, SP_ERR_ARG, "tensor '%s': no data", name);
    for (size_t i = 0; i < w->n_t; i++) {
        if (strcmp(w->ts[i].name, name) == 0) return sp_fail(err, SP_ERR_ARG, "duplicate tensor name '%s'", name);
    }
    if (w->n_t == w->cap_t) {
        size_t cap = w->cap_t ? w->cap_t * 2 : 16;
        wtensor *nt = realloc(w->ts, cap * sizeof *nt);
        if (!nt) return sp_fail(err, SP_ERR_NOMEM, "out of memory adding tensor '%s'", name);
        w->ts = nt;
        w->cap_t = cap;
    }
    t.nbytes = nbytes;
    t.name = strdup(name);
    if (!t.name) return sp_fail(err, SP_ERR_NOMEM, "out of memory adding tensor '%s'", name);
    if (borrow || nbytes == 0) {
        t.data = data;
    } else {
        if (nbytes > SIZE_MAX || !(t.owned = malloc((size_t)nbytes))) {
            free(t.name);
            return sp_fail(err, SP_ERR_NOMEM, "out of memory copying tensor '%s' (%" PRIu64 " bytes)", name, nbytes);
        }
        memcpy(t.owned, data, (size_t)nbytes);
        t.data = t.owned;
    }
    w->ts[w->n_t++] = t;
    return SP_OK;
}

static uint64_t pad_to(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

/* Header, KVs and tensor infos, padded to the data section. */
static void build_meta(const sp_gguf_writer *w, bbuf *o) {
    bb_put(o, "GGUF", 4);
    bb_le(o, 3, 4);
    bb_le(o, w->n_t, 8);
    bb_le(o, w->n_kv, 8);
    for (size_t i = 0; i < w->n_kv; i++) {
        bb_str(o, w->kvs[i].key, strlen(w->kvs[i].key));
        bb_le(o, w->kvs[i].type, 4);
        bb_put(o, w->kvs[i].val.b, w->kvs[i].val.n);
    }
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        bb_str(o, t->name, strlen(t->name));
        bb_le(o, t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) bb_le(o, (uint64_t)t->ne[d], 8);
        bb_le(o, (uint64_t)t->type, 4);
        bb_le(o, off, 8);
        off += pad_to(t->nbytes, WRITE_ALIGNMENT);
    }
    static const uint8_t zeros[WRITE_ALIGNMENT];
    bb_put(o, zeros, (size_t)(pad_to(o->n, WRITE_ALIGNMENT) - o->n));
}

/* The alignment is fixed at 32; a caller-set general.alignment must agree. */
static sp_status check_alignment_key(const sp_gguf_writer *w, sp_error *err) {
    for (size_t i = 0; i < w->n_kv; i++) {
        const wkv *kv = &w->kvs[i];
        if (strcmp(kv->key, "general.alignment") != 0) continue;
        if (kv->type != SP_GGUF_UINT32 || kv->val.n != 4 || kv->val.b[0] != WRITE_ALIGNMENT ||
            kv->val.b[1] || kv->val.b[2] || kv->val.b[3]) {
            return sp_fail(err, SP_ERR_ARG, "the GGUF writer only writes general.alignment = u32 %d",
                           WRITE_ALIGNMENT);
        }
    }
    return SP_OK;
}

sp_status sp_gguf_writer_write(sp_gguf_writer *w, const char *path, sp_error *err) {
    SP_ASSERT(w != NULL && path != NULL);
    if (w->oom) return sp_fail(err, SP_ERR_NOMEM, "out of memory building GGUF %s", path);
    sp_status s = check_alignment_key(w, err);
    if (s) return s;
    bbuf meta = {0};
    build_meta(w, &meta);
    if (meta.oom) {
        free(meta.b);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory building GGUF %s", path);
    }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) {
        free(meta.b);
        return sp_fail(err, SP_ERR_NOMEM, "out of memory writing %s", path);
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd >= 0) {
        /* mkstemp makes the file 0600; the result gets the mode any new file
         * gets here (0666 less the umask), as fopen would give it */
        mode_t um = umask(0);
        umask(um);
        (void)fchmod(fd, 0666 & ~um);
    }
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        int e = errno;
        if (fd >= 0) {
            close(fd);
            unlink(tmp);
        }
        free(tmp);
        free(meta.b);
        return sp_fail(err, SP_ERR_IO, "cannot create %s: %s", path, strerror(e));
    }
    static const uint8_t zeros[WRITE_ALIGNMENT];
    bool ok = fwrite(meta.b, 1, meta.n, f) == meta.n;
    for (size_t i = 0; ok && i < w->n_t; i++) {
        const wtensor *t = &w->ts[i];
        size_t pad = (size_t)(pad_to(t->nbytes, WRITE_ALIGNMENT) - t->nbytes);
        ok = fwrite(t->data, 1, (size_t)t->nbytes, f) == t->nbytes && fwrite(zeros, 1, pad, f) == pad;
    }
    int e = errno;
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) {
        if (ok) e = errno;
        ok = false;
    }
    if (fclose(f) != 0) {
        if (ok) e = errno;
        ok = false;
    }
    if (ok && rename(tmp, path) != 0) {
        e = errno;
        ok = false;
    }
    free(meta.b);
    if (!ok) {
        unlink(tmp);
        free(tmp);
        return sp_fail(err, SP_ERR_IO, "cannot write %s: %s", path, strerror(e));
    }
    free(tmp);
    return SP_OK;
}

void sp_gguf_writer_copy_kv(sp_gguf_writer *w, const sp_gguf *g, const char *prefix) {
    size_t plen = prefix ? strlen(prefix) : 0;
    for (uint64_t i = 0; i < sp_gguf_n_kv(g); i++) {
        const sp_gguf_kv *kv = sp_gguf_kv_at(g, i);
        if (plen && (kv->key.len < plen || memcmp(kv->key.ptr, prefix, plen))) continue;
        char *key = malloc(kv->key.len + 1);
        if (!key) {
            w->oom = true; /* reported by sp_gguf_writer_write, as every setter's */
            return;
        }
        memcpy(key, kv->key.ptr, kv->key.len);
        key[kv->key.len] = 0;
        union {
            uint8_t u8; int8_t i8; uint16_t u16; int16_t i16; uint32_t u32; int32_t i32;
            uint64_t u64; int64_t i64; float f32; double f64;
        } v;
        switch (kv->type) {
        case SP_GGUF_UINT8: v.u8 = (uint8_t)kv->v.u64; break;
        case SP_GGUF_INT8: v.i8 = (int8_t)kv->v.i64; break;
        case SP_GGUF_UINT16: v.u16 = (uint16_t)kv->v.u64; break;
        case SP_GGUF_INT16: v.i16 = (int16_t)kv->v.i64; break;
        case SP_GGUF_UINT32: v.u32 = (uint32_t)kv->v.u64; break;
        case SP_GGUF_INT32: v.i32 = (int32_t)kv->v.i64; break;
        case SP_GGUF_UINT64: v.u64 = kv->v.u64; break;
        case SP_GGUF_INT64: v.i64 = kv->v.i64; break;
        case SP_GGUF_FLOAT32: v.f32 = (float)kv->v.f64; break;
        case SP_GGUF_FLOAT64: v.f64 = kv->v.f64; break;
        case SP_GGUF_BOOL: v.u8 = kv->v.b; break;
        default: break;
        }
        if (kv->type == SP_GGUF_STRING) {
            bbuf o = {0};
            bb_str(&o, kv->v.str.ptr, kv->v.str.len);
            set_kv(w, key, SP_GGUF_STRING, o);
        } else if (kv->type == SP_GGUF_ARRAY && kv->arr_type == SP_GGUF_STRING) {
            sp_str *a = malloc((kv->arr_n ? kv->arr_n : 1) * sizeof *a);
            if (!a) {
                w->oom = true;
                free(key);
                return;
            }
            for (uint64_t j = 0; j < kv->arr_n; j++) a[j] = sp_gguf_arr_str(kv, j);
            sp_gguf_writer_set_arr_str(w, key, a, kv->arr_n);
            free(a);
        } else if (kv->type == SP_GGUF_ARRAY && kv->arr_type != SP_GGUF_ARRAY) {
            sp_gguf_writer_set_arr(w, key, kv->arr_type, kv->arr_data, kv->arr_n);
        } else if (kv->type != SP_GGUF_ARRAY) {
            sp_gguf_writer_set_scalar(w, key, kv->type, &v);
        }
        free(key);
    }
}
