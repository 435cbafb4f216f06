/* gguf.h: read (through mmap) and write GGUF files, the llama.cpp model format.
 *
 * Layout (v2/v3, little-endian):
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { gguf_string key | u32 value_type | value }
 *   n_tensors x { gguf_string name | u32 n_dims | n_dims x u64 ne | u32 ggml_type | u64 offset }
 *   padding to `general.alignment` (default 32) | tensor data (offsets relative to here)
 *   gguf_string = u64 length + bytes (not NUL-terminated)
 *   array value = u32 element type | u64 count | elements
 * The reader validates every length, count and offset against the bytes left
 * in the file; nothing past the mapping is ever read. Strings returned point
 * into the mapping (sp_str, not NUL-terminated) and live until sp_gguf_close. */
#ifndef SP_GGUF_H
#define SP_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "file.h"
#include "sp_status.h"

typedef enum sp_gguf_type {
    SP_GGUF_UINT8 = 0, SP_GGUF_INT8 = 1, SP_GGUF_UINT16 = 2, SP_GGUF_INT16 = 3,
    SP_GGUF_UINT32 = 4, SP_GGUF_INT32 = 5, SP_GGUF_FLOAT32 = 6, SP_GGUF_BOOL = 7,
    SP_GGUF_STRING = 8, SP_GGUF_ARRAY = 9, SP_GGUF_UINT64 = 10, SP_GGUF_INT64 = 11,
    SP_GGUF_FLOAT64 = 12
} sp_gguf_type;

typedef struct sp_str {
    const char *ptr;
    uint64_t len;
} sp_str;

typedef struct sp_gguf_kv {
    sp_str key;
    sp_gguf_type type;
    union {
        uint64_t u64;  /* any unsigned integer type, widened */
        int64_t i64;   /* any signed integer type, widened */
        double f64;    /* FLOAT32 / FLOAT64, widened */
        bool b;
        sp_str str;
    } v;
    /* ARRAY only: element type, count, and the raw little-endian elements,
     * which may be unaligned (read them with sp_gguf_arr_f32/_int). For
     * STRING arrays arr_data is a reader-built sp_str[arr_n] table (use
     * sp_gguf_arr_str). For arrays of arrays it points at the first nested
     * array's raw {u32 type, u64 count, elements} in the file. */
    sp_gguf_type arr_type;
    uint64_t arr_n;
    const void *arr_data;
} sp_gguf_kv;

typedef struct sp_gguf_tensor {
    sp_str name;
    uint32_t n_dims;
    int64_t ne[4];      /* ne[0] is the contiguous (row) dimension; unused dims are 1 */
    sp_ggml_type type;
    uint64_t offset;    /* relative to the data section */
    uint64_t nbytes;
    const void *data;   /* into the mapping */
} sp_gguf_tensor;

typedef struct sp_gguf sp_gguf;

sp_status sp_gguf_open(const char *path, sp_gguf **out, sp_error *err);
void sp_gguf_close(sp_gguf *g);

uint32_t sp_gguf_version(const sp_gguf *g);
uint64_t sp_gguf_n_kv(const sp_gguf *g);
const sp_gguf_kv *sp_gguf_kv_at(const sp_gguf *g, uint64_t i);
/* NULL when absent. */
const sp_gguf_kv *sp_gguf_find(const sp_gguf *g, const char *key);

uint64_t sp_gguf_n_tensors(const sp_gguf *g);
const sp_gguf_tensor *sp_gguf_tensor_at(const sp_gguf *g, uint64_t i);
const sp_gguf_tensor *sp_gguf_find_tensor(const sp_gguf *g, const char *name);

/* Typed getters: SP_OK, or SP_ERR_FORMAT (with a message naming the key) when
 * the key is absent or of an incompatible type. Integer getters accept any
 * integer type whose value fits. */
sp_status sp_gguf_get_u32(const sp_gguf *g, const char *key, uint32_t *out, sp_error *err);
sp_status sp_gguf_get_f32(const sp_gguf *g, const char *key, float *out, sp_error *err);
sp_status sp_gguf_get_str(const sp_gguf *g, const char *key, sp_str *out, sp_error *err);
/* Element i of a STRING array (bounds-checked by SP_ASSERT). */
sp_str sp_gguf_arr_str(const sp_gguf_kv *kv, uint64_t i);

/* Element i of a FLOAT32 or FLOAT64 array, as float (bounds-checked by SP_ASSERT). */
float sp_gguf_arr_f32(const sp_gguf_kv *kv, uint64_t i);
/* Element i of an integer (or BOOL) array, widened (bounds-checked by SP_ASSERT). */
int64_t sp_gguf_arr_int(const sp_gguf_kv *kv, uint64_t i);
/* File offset of the tensor data section, and the alignment in force. */
uint64_t sp_gguf_data_offset(const sp_gguf *g);
/* The whole file's mapping (for residency: sp_file_map_resident). */
sp_file_map sp_gguf_mapping(const sp_gguf *g);
uint64_t sp_gguf_alignment(const sp_gguf *g);

/* Bytes of one fixed-size metadata value of type t; 0 for STRING and
 * ARRAY, -1 for an unknown type. One table for the reader and the writer. */
int sp_gguf_scalar_size(sp_gguf_type t);

/* Block size in elements and bytes per block; 0 for unknown types. */
int64_t sp_ggml_blck_size(sp_ggml_type t);
int64_t sp_ggml_type_size(sp_ggml_type t);
/* Bytes taken by a row of n elements (n must be a multiple of the block). */
uint64_t sp_ggml_row_size(sp_ggml_type t, int64_t n);

#endif
