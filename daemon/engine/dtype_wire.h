/* dpm_dtype on the wire: TensorProto.dtype (get-blob answers, predictor
 * files) is the proto enum DType (proto/dpm.proto), whose values are those
 * of dpm_dtype, number for number; the bytes are what they were when the
 * field was a uint32.
 *
 * Both lists are checked against each other at compile time below: a
 * dpm_dtype added without its DTYPE_ value (and a line here), or a value
 * numbered differently, does not compile. Values cross only through these
 * two functions.
 *
 * Pure; safe from any thread. */
#ifndef DPM_DTYPE_WIRE_H
#define DPM_DTYPE_WIRE_H

#include "engine/tensor.h"
#include "proto/dpm.pb-c.h"

_Static_assert((int)DPM__DTYPE__DTYPE_F32 == (int)DPM_F32, "DTYPE_F32 is DPM_F32");
_Static_assert((int)DPM__DTYPE__DTYPE_I32 == (int)DPM_I32, "DTYPE_I32 is DPM_I32");
_Static_assert((int)DPM__DTYPE__DTYPE_I64 == (int)DPM_I64, "DTYPE_I64 is DPM_I64");
_Static_assert((int)DPM__DTYPE__DTYPE_BF16 == (int)DPM_BF16, "DTYPE_BF16 is DPM_BF16");
_Static_assert((int)DPM__DTYPE__DTYPE_F16 == (int)DPM_F16, "DTYPE_F16 is DPM_F16");
_Static_assert(DPM_DTYPE_COUNT == 5, "a new dpm_dtype needs its DTYPE_ value in "
                                     "proto/dpm.proto and its check above");

static inline Dpm__DType dpm_dtype_to_wire(dpm_dtype t) { return (Dpm__DType)(int)t; }

/* The dtype of a tensor read from a file or a peer: 0 with *out set, or -1
 * for a value this build does not know (the caller refuses the tensor). */
static inline int dpm_dtype_from_wire(Dpm__DType w, dpm_dtype *out) {
  if ((unsigned)w >= DPM_DTYPE_COUNT) return -1;
  *out = (dpm_dtype)(int)w;
  return 0;
}

#endif
