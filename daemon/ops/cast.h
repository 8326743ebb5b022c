/* Cast's arguments (ops/cast.c), for the precision rewrite and the kernels. */
#ifndef DPM_OPS_CAST_H
#define DPM_OPS_CAST_H

#include "engine/op.h"

/* In the order of Cast's argument table. */
enum { CAST_ARG_FROM, CAST_ARG_TO };

/* The type argument `arg` (CAST_ARG_FROM or CAST_ARG_TO) of Cast node n. */
dpm_dtype dpm_cast_type(const dpm_node *n, int arg);
/* The text of type t as Cast's arguments take it ("bf16"), or NULL for a
 * type Cast does not convert (the integers). */
const char *dpm_cast_choice(dpm_dtype t);

#endif
