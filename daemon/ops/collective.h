/* The positions and values of Allreduce's argument, which its semantics
 * (ops/collective.c) define and the engine's kernel (engine/collective.c)
 * reads. */
#ifndef DPM_OPS_COLLECTIVE_H
#define DPM_OPS_COLLECTIVE_H

enum { ALLREDUCE_ARG_DTYPE };
/* The choices of dtype, by index: "f32" sums the blobs' floats, "f64" sums
 * their bytes as doubles (half as many as the floats of their shape). */
enum { ALLREDUCE_F32, ALLREDUCE_F64 };

#endif
