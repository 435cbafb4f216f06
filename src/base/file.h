/* file.h: opening the files users name (models, tokenizers, prompts) safely.
 *
 * Every path goes through here, so a directory, a FIFO or a device where a
 * file belongs is one clear error instead of a hang (a FIFO blocks open and
 * read) or a nonsense size (a directory). `what` names the file in messages
 * ("model", "tokenizer", "prompt file"). Also SHA-256 (FIPS 180-4), used to
 * verify downloads and the shared test models. */
#ifndef SP_FILE_H
#define SP_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sp_status.h"

/* Opens path read-only and checks it is a regular file, without blocking on
 * a FIFO. On success *fd is open (blocking mode, close-on-exec) and *size is
 * the file size in bytes. SP_ERR_IO with "cannot open WHAT PATH: reason" or
 * "WHAT PATH is a directory / is not a regular file". */
sp_status sp_file_open(const char *path, const char *what, int *fd, uint64_t *size, sp_error *err);

/* A read-only private mapping of a whole regular file. */
typedef struct sp_file_map {
    const uint8_t *data; /* NULL for an empty file */
    uint64_t size;
} sp_file_map;

/* Maps path; SP_ERR_FORMAT when it has fewer than min_size bytes. Release
 * with sp_file_unmap (safe on a zeroed map). */
sp_status sp_file_map_open(const char *path, const char *what, uint64_t min_size, sp_file_map *out,
                           sp_error *err);
void sp_file_unmap(sp_file_map *m);

/* Keeps a mapping resident. prefault: read every page in now (after
 * madvise(MADV_WILLNEED)), so the first forward pass does not pay for disk
 * or page-cache misses; lock: mlock the pages so the kernel cannot evict
 * them (SP_ERR_RANGE naming RLIMIT_MEMLOCK when the limit refuses it). */
sp_status sp_file_map_resident(const sp_file_map *m, bool prefault, bool lock, const char *what,
                               sp_error *err);

/* Reads a whole regular file into a new NUL-terminated buffer (free() it);
 * SP_ERR_RANGE when it exceeds max_bytes. */
sp_status sp_file_read(const char *path, const char *what, uint64_t max_bytes, char **buf,
                       size_t *len, sp_error *err);

/* SHA-256 of n bytes into out[32]. */
void sp_sha256(const void *data, size_t n, uint8_t out[32]);
/* SHA-256 of a file as 64 lowercase hex digits plus NUL. */
sp_status sp_file_sha256(const char *path, const char *what, char hex[65], sp_error *err);

#endif
