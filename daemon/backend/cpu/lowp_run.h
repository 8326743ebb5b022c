/* Ops over bf16/f16 tensors on the CPU (a model whose precision.compute is
 * bf16 or fp16; engine/precision.h). FC, Conv and their gradients with
 * every tensor bf16 run native bf16 products where the CPU has
 * AVX512-BF16 (backend/cpu/fc_bf16.c, conv.c, gemm_bf16.h; chosen at run
 * time, each run); ReluGradient over bf16 runs on the bits on any CPU.
 * Every other such op, and those on other CPUs or with
 * DPM_CPU_KERNELS=generic, take the fallback: correct, not fast. An op
 * that reads or writes a 16-bit tensor (other than Cast, which converts, and
 * an optimizer writing a working copy: backend/cpu/optim.c)
 * runs its f32 kernel on f32 copies:
 * every 16-bit tensor of the op is widened (exactly) into scratch, the f32
 * kernel runs on the copies, and the copies of its outputs are rounded
 * back to their type (to nearest even). So an FC or Conv in bf16 multiplies
 * bf16 values and accumulates in f32, rounding its output once; an
 * element-wise op computes in f32 and rounds once.
 *
 * The executor (engine/exec.c) binds such an op to dpm_cpu_lowp_kernel
 * with its own kernel as dpm_op.inner, and sizes its scratch with
 * dpm_cpu_lowp_scratch. Thread-safety as any kernel's: one op on one
 * worker. */
#ifndef DPM_BACKEND_CPU_LOWP_RUN_H
#define DPM_BACKEND_CPU_LOWP_RUN_H

#include "backend/backend.h"

extern const dpm_kernel_def dpm_cpu_lowp_kernel;

/* Whether node n, whose input and output types are in[] and out[], runs
 * through dpm_cpu_lowp_kernel: a 16-bit tensor among them, and not a Cast
 * or an optimizer writing a working copy (DPM_FUSE_WORKING_COPY), whose
 * kernels convert themselves. */
int dpm_cpu_lowp_wanted(const dpm_node *n, const dpm_shape *in, const dpm_shape *out);

/* Scratch bytes of node n through the wrapper around `inner`: the larger
 * of the native kernel's (if any) and the fallback's: inner's at the f32
 * shapes, then an f32 copy of each distinct 16-bit blob of n (in[k] and
 * out[k] are n's shapes; a blob named twice is copied once). */
size_t dpm_cpu_lowp_scratch(const dpm_kernel_def *inner, const dpm_node *n,
                            const dpm_shape *in, const dpm_shape *out);

/* FC and FCGradient with every tensor bf16, natively (fc_bf16.c): the
 * scratch bytes node n needs at types in[], out[] (0 for other nodes;
 * SIZE_MAX when they overflow), and running op (its tensors' shapes in[],
 * out[]) with that scratch: 1 if it ran, 0 when not such an op or the
 * native kernels are off (dpm_bf16_native). */
size_t dpm_cpu_fc_bf16_scratch(const dpm_node *n, const dpm_shape *in,
                               const dpm_shape *out);
int dpm_cpu_fc_bf16_run(const dpm_op *op, const dpm_shape *in, const dpm_shape *out,
                        void *scratch);
/* FCGradient without dX (the first layer's: backward's last op), native,
 * split by rows of dW for work sharing (parallel/share.h): parts (0: not
 * such an op, or the native kernels are off), the packing every part
 * reads (into the op's scratch, once, before any part runs), and a part.
 * prepare then every part gives dpm_cpu_fc_bf16_run's bits. */
int dpm_cpu_fc_bf16_parts(const dpm_op *op);
void dpm_cpu_fc_bf16_prepare(const dpm_op *op);
void dpm_cpu_fc_bf16_part(const dpm_op *op, int part);
/* The same for Conv and ConvGradient (conv.c), which lay out the op's
 * whole scratch themselves. */
size_t dpm_cpu_conv_bf16_scratch(const dpm_node *n, const dpm_shape *in,
                                 const dpm_shape *out);
int dpm_cpu_conv_bf16_run(const dpm_op *op, const dpm_shape *in, const dpm_shape *out,
                          void *scratch);

/* ReluGradient with every tensor bf16 (elementwise.c), natively on any
 * CPU, the fallback's bits: 1 if it ran, 0 when not such an op. */
int dpm_cpu_relu_grad_bf16_run(const dpm_op *op);

/* n values between f32 and type t (f32, bf16 or f16; backend/cpu/cast.c). */
void dpm_cpu_widen(float *dst, const void *src, dpm_dtype t, size_t n);
void dpm_cpu_narrow(void *dst, const float *src, dpm_dtype t, size_t n);

#endif
