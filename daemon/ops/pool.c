/* placeholder: filled by the pool op family. */
#include "engine/op.h"
#include "ops/families.h"
const dpm_op_def *const dpm_ops_pool[] = {NULL};
