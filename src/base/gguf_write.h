/* gguf_write.h: the GGUF writer (internal: used by mkmodel, checkpoints and
 * tests; reading GGUF: gguf.h). */
#ifndef SP_GGUF_WRITE_H
#define SP_GGUF_WRITE_H

#include "gguf.h"

/* ---- Writer (used by `specula mkmodel` and by tests that build files). ---- */
typedef struct sp_gguf_writer sp_gguf_writer;

sp_gguf_writer *sp_gguf_writer_init(void);
void sp_gguf_writer_free(sp_gguf_writer *w);
void sp_gguf_writer_set_u32(sp_gguf_writer *w, const char *key, uint32_t v);
void sp_gguf_writer_set_i32(sp_gguf_writer *w, const char *key, int32_t v);
void sp_gguf_writer_set_f32(sp_gguf_writer *w, const char *key, float v);
void sp_gguf_writer_set_bool(sp_gguf_writer *w, const char *key, bool v);
void sp_gguf_writer_set_str(sp_gguf_writer *w, const char *key, const char *v);
/* Any fixed-size scalar type (integers, floats, bool): *v is the native value
 * of that type (bool as one byte). Setting a key again replaces its value. */
void sp_gguf_writer_set_scalar(sp_gguf_writer *w, const char *key, sp_gguf_type type, const void *v);
/* Arrays are copied. sp_gguf_writer_set_arr takes n native values of a
 * fixed-size element type (not STRING/ARRAY). */
void sp_gguf_writer_set_arr(sp_gguf_writer *w, const char *key, sp_gguf_type elem_type, const void *v,
                            uint64_t n);
void sp_gguf_writer_set_arr_str(sp_gguf_writer *w, const char *key, const sp_str *v, uint64_t n);
void sp_gguf_writer_set_arr_f32(sp_gguf_writer *w, const char *key, const float *v, uint64_t n);
void sp_gguf_writer_set_arr_i32(sp_gguf_writer *w, const char *key, const int32_t *v, uint64_t n);
/* Copies every key/value of g whose key starts with `prefix` (NULL: all),
 * with its exact type; nested arrays are skipped. */
void sp_gguf_writer_copy_kv(sp_gguf_writer *w, const sp_gguf *g, const char *prefix);
/* Adds a tensor; `data` (sp_ggml_row_size(type, ne[0]) * rows bytes) is
 * copied unless `borrow` is true, in which case it must outlive the write. */
sp_status sp_gguf_writer_add_tensor(sp_gguf_writer *w, const char *name, sp_ggml_type type,
                                    uint32_t n_dims, const int64_t *ne, const void *data,
                                    bool borrow, sp_error *err);
/* Writes GGUF v3, alignment 32, tensors contiguous in insertion order, via a
 * temporary file renamed onto `path`. SP_ERR_IO (naming the path) on write
 * failure, SP_ERR_NOMEM if an earlier setter ran out of memory, SP_ERR_ARG if
 * general.alignment was set to anything but u32 32. Tensor names: 1..63
 * bytes (add_tensor returns SP_ERR_ARG otherwise, or for duplicates, bad
 * dims or a row length not a multiple of the block). */
sp_status sp_gguf_writer_write(sp_gguf_writer *w, const char *path, sp_error *err);

#endif
