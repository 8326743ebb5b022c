/* Op families: one file each under daemon/ops/, each defining the defs of
 * its ops in the op list (ops/list.h) as `const dpm_op_def DPM_OP_DEF(ID)`,
 * declared here; registry.c indexes them by id. */
#ifndef DPM_OPS_FAMILIES_H
#define DPM_OPS_FAMILIES_H

#include "engine/op.h"

#define XX(id, name) extern const dpm_op_def DPM_OP_DEF(id);
DPM_OP_MAP(XX)
#undef XX

#endif
