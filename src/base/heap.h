/* heap.h: one binary heap (max-heap by a caller's "above" order) over a
 * caller-owned array, instantiated per element type by SP_HEAP_DEFINE. The
 * SentencePiece and BPE encoders use it for their candidate merges.
 *
 *   SP_HEAP_DEFINE(name, T, above)   defines
 *     static void name_push(T *h, int32_t *n, T x);  h needs room for *n + 1
 *     static T name_pop(T *h, int32_t *n);           requires *n > 0
 *   where above(const T *a, const T *b) is nonzero when a must come out first. */
#ifndef SP_HEAP_H
#define SP_HEAP_H

#include <stdint.h>

#define SP_HEAP_DEFINE(NAME, T, ABOVE)                                                \
    static inline void NAME##_push(T *h, int32_t *n, T x) {                           \
        int32_t i = (*n)++;                                                           \
        while (i > 0) {                                                               \
            int32_t p = (i - 1) / 2;                                                  \
            if (!ABOVE(&x, &h[p])) break;                                             \
            h[i] = h[p];                                                              \
            i = p;                                                                    \
        }                                                                             \
        h[i] = x;                                                                     \
    }                                                                                 \
    static inline T NAME##_pop(T *h, int32_t *n) {                                    \
        T top = h[0], x = h[--*n];                                                    \
        int32_t i = 0;                                                                \
        for (;;) {                                                                    \
            int32_t c = 2 * i + 1;                                                    \
            if (c >= *n) break;                                                       \
            if (c + 1 < *n && ABOVE(&h[c + 1], &h[c])) c++;                           \
            if (!ABOVE(&h[c], &x)) break;                                             \
            h[i] = h[c];                                                              \
            i = c;                                                                    \
        }                                                                             \
        if (*n > 0) h[i] = x;                                                         \
        return top;                                                                   \
    }

#endif
