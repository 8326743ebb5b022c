/* Cast: the engine's conversion between the floating types (f32, bf16,
 * f16), which the precision rewrite (engine/precision.h) inserts where a
 * low-precision op meets an f32 one and to make the working copies of the
 * f32 parameters. Hidden: specs do not write it.
 *
 * Cast(X) -> Y, arguments `from` (X's type, checked) and `to`. Narrowing
 * rounds to nearest even (engine/lowp.h); widening is exact. The gradient
 * is the cast back: Cast(dY) from `to` to `from`, so a parameter's
 * gradient arrives in f32 whatever type its working copy has. */
#include "ops/cast.h"
#include "engine/op.h"
#include "ops/families.h"

/* The choices of `from` and `to`, by index (dpm_arg.i). */
static const dpm_dtype cast_types[] = {DPM_F32, DPM_BF16, DPM_F16};

static const dpm_arg_def cast_args[] = {
    {"from", DPM_ARG_STRING, NULL, "f32|bf16|f16", 0, 0},
    {"to", DPM_ARG_STRING, NULL, "f32|bf16|f16", 0, 0},
    {NULL},
};

dpm_dtype dpm_cast_type(const dpm_node *n, int arg) { return cast_types[n->arg[arg].i]; }

const char *dpm_cast_choice(dpm_dtype t) {
  for (size_t i = 0; i < sizeof cast_types / sizeof *cast_types; i++)
    if (cast_types[i] == t) return dpm_dtype_name(t);
  return NULL;
}

static dpm_status cast_infer(const dpm_node *n, const dpm_shape *in, dpm_shape *out,
                             dpm_err *err) {
  if (dpm_expect_dtype(&in[0], dpm_cast_type(n, CAST_ARG_FROM), "input", err))
    return err->code;
  out[0] = in[0];
  out[0].dtype = dpm_cast_type(n, CAST_ARG_TO);
  return DPM_OK;
}

/* dX = Cast(dY) back: `from` and `to` swapped. */
static dpm_status cast_grad(dpm_grad *g, dpm_err *err) {
  dpm_status s = dpm_grad_emit(g, DPM_OP_CAST, 1, &g->gout[0], 1, &g->gin[0], err);
  if (s) return s;
  dpm_node *n = dpm_grad_last(g);
  dpm_arg from = n->arg[CAST_ARG_FROM];
  n->arg[CAST_ARG_FROM] = n->arg[CAST_ARG_TO];
  n->arg[CAST_ARG_TO] = from;
  return DPM_OK;
}

const dpm_op_def DPM_OP_DEF(CAST) = {
    .id = DPM_OP_CAST,
    .name = "Cast",
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .args = cast_args,
    .infer = cast_infer,
    .grad = cast_grad,
    .flags = DPM_OP_HIDDEN,
};
