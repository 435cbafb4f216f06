/* unicode: code point classes by binary search over the generated ranges
 * (unicode_tables.c). */
#include "unicode.h"

sp_ucl sp_unicode_class(uint32_t cp) {
    int lo = 0, hi = sp_ucl_n_ranges - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        if (cp < sp_ucl_ranges[mid].first) hi = mid - 1;
        else if (cp > sp_ucl_ranges[mid].last) lo = mid + 1;
        else return (sp_ucl)sp_ucl_ranges[mid].cls;
    }
    return SP_UCL_OTHER;
}
