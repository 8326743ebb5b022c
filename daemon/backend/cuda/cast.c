/* The CUDA kernel of Cast (ops/cast.c): f32 <-> bf16/f16 and bf16 <-> f16
 * by elem.h's conversions (engine/lowp.h's, bit for bit: round to nearest
 * even, NaN kept quiet, widening exact; tests/unit/cuda_elem_test.c checks
 * them on the host), one launch of elementwise_kernels.cu on the device's
 * compute stream; the same type is a device-to-device copy (nothing in
 * place). The types are the tensors' own (the def's infer made them the
 * arguments'). Errors: a failed launch or copy is the device's sticky
 * error (cuda.h). */
#include "backend/cuda/cuda.h"
#include "backend/cuda/elementwise_launch.h"

/* The launcher's code of a floating type; -1 for any other. */
static int ftype(dpm_dtype t) {
  switch (t) {
  case DPM_F32:
    return DPM_CUDA_T_F32;
  case DPM_BF16:
    return DPM_CUDA_T_BF16;
  case DPM_F16:
    return DPM_CUDA_T_F16;
  default:
    return -1;
  }
}

static void cast_run(const dpm_op *op) {
  cuda_dev *dev = cuda_dev_of(op);
  const dpm_tensor *x = op->in[0], *y = op->out[0];
  int from = ftype(x->shape.dtype), to = ftype(y->shape.dtype);
  if (from < 0 || to < 0) { /* infer accepts floating types only */
    cuda_check(dev, 0, cudaErrorInvalidValue, "Cast: not a floating type");
    return;
  }
  if (from == to) {
    size_t bytes = cuda_bytes(x);
    if (x->data != y->data && bytes)
      CUDA_OK(dev, cudaMemcpyAsync(y->data, x->data, bytes, cudaMemcpyDeviceToDevice,
                                   dev->compute));
    return;
  }
  dpm_cuda_cast((dpm_cuda_ftype)from, (dpm_cuda_ftype)to, x->data, y->data, cuda_numel(x),
                dev->compute);
  CUDA_OK(dev, cudaGetLastError());
}

const dpm_kernel_def DPM_CUDA_KERNEL(CAST) = {.run = cast_run};
