/* verify_internal: workspace storage shared by verify.c and verify_tree.c. */
#ifndef SP_VERIFY_INTERNAL_H
#define SP_VERIFY_INTERNAL_H

#include "verify.h"

/* n_rows x V doubles of scratch owned by the workspace, grown on first need
 * (so a workspace allocates at most once per larger tree depth, never per
 * call once warmed up) and reused. NULL if that allocation fails. */
double *sp_verify_ws_rows(sp_verify_ws *ws, int32_t n_rows);

#endif
