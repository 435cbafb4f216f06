/* llamacpp_ref_testutil.h: one iteration record of llama.cpp's
 * llama-speculative-simple logs as scripts/eagle3_ref.py writes them
 * (tests/data/eagle3, tests/data/mtp): "... draft T1 T2 ... accepted A next N",
 * or "accepted A restored next N" where llama.cpp restored a checkpoint and
 * verified again. Shared by test_eagle3_llamacpp and test_mtp_llamacpp. */
#ifndef LLAMACPP_REF_TESTUTIL_H
#define LLAMACPP_REF_TESTUTIL_H

#include "testutil.h"

typedef struct ref_iter {
    int32_t draft[8], nd, accepted, next;
    bool restored; /* llama.cpp's checkpoint path: verified again after a partial acceptance */
} ref_iter;

/* Parses line (of file path) into it; fails the test on a malformed line. */
static inline void ref_parse_iter(const char *path, const char *line, ref_iter *it) {
    const char *p = strstr(line, "draft "), *a = strstr(line, " accepted ");
    if (!p || !a) fail_msg("%s: bad line '%s'", path, line);
    p += 6;
    it->nd = 0;
    while (p < a) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (it->nd == 8) fail_msg("%s: draft longer than 8", path);
        it->draft[it->nd++] = (int32_t)v;
        p = end;
    }
    it->restored = strstr(a, " restored ") != NULL;
    if (sscanf(a, it->restored ? " accepted %d restored next %d" : " accepted %d next %d", &it->accepted,
               &it->next) != 2)
        fail_msg("%s: bad line '%s'", path, line);
}

#endif
