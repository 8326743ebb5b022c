/* The precision policy table (ops/precision.h), indexed by op id. */
#include "ops/precision.h"

#include <assert.h>

static const dpm_prec_class classes[DPM_OP_COUNT] = {
#define XX(id, c) [DPM_OP_##id] = DPM_PREC_##c,
    DPM_PRECISION_MAP(XX)
#undef XX
};

#define XX(id, c) +1
enum { N_ROWS = 0 DPM_PRECISION_MAP(XX) };
#undef XX
_Static_assert((int)N_ROWS == (int)DPM_OP_COUNT,
               "one precision row per op (ops/precision.h)");

dpm_prec_class dpm_op_precision(dpm_op_id id) {
  assert((unsigned)id < DPM_OP_COUNT);
  return classes[id];
}

const char *dpm_prec_class_name(dpm_prec_class c) {
  static const char *const names[] = {[DPM_PREC_NONE] = "none",
                                      [DPM_PREC_LOW] = "low",
                                      [DPM_PREC_FP32] = "fp32",
                                      [DPM_PREC_PASS] = "pass",
                                      [DPM_PREC_CAST] = "cast"};
  return (unsigned)c < sizeof names / sizeof *names ? names[c] : "none";
}
