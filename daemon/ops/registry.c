/* The operator table: every op family file exports a NULL-terminated list of
 * its defs; this file is the one place they are gathered. */
#include <string.h>

#include "engine/op.h"
#include "ops/families.h"

static const dpm_op_def *const *const families[] = {
    dpm_ops_elementwise, dpm_ops_shape, dpm_ops_fc,         dpm_ops_conv,
    dpm_ops_pool,        dpm_ops_norm,  dpm_ops_dropout,    dpm_ops_loss,
    dpm_ops_fill,        dpm_ops_optim, dpm_ops_collective,
};

#define MAX_OPS 128
static const dpm_op_def *all_ops[MAX_OPS];
static int n_ops;

static void gather(void) {
  if (n_ops) return;
  for (size_t f = 0; f < sizeof families / sizeof *families; f++)
    for (const dpm_op_def *const *d = families[f]; *d && n_ops < MAX_OPS; d++)
      all_ops[n_ops++] = *d;
}

const dpm_op_def *const *dpm_op_all(int *count) {
  gather();
  *count = n_ops;
  return all_ops;
}

const dpm_op_def *dpm_op_find(const char *name) {
  int n;
  const dpm_op_def *const *all = dpm_op_all(&n);
  for (int i = 0; i < n; i++)
    if (!strcmp(all[i]->name, name)) return all[i];
  return NULL;
}
