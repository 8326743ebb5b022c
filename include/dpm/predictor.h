/* dpm predictor runtime: runs a predictor extracted from a trained model
 * (`dpmctl extract-predictor`, Caffe2's ExtractPredictorNet) without the
 * daemon.
 *
 * A predictor directory holds `predictor.pb`: a protobuf PredictorDef
 * (proto/dpm.proto) with the forward operators in test mode (SpatialBN on
 * running statistics, Dropout the identity), the names of its inputs and
 * outputs, the shape of one example of each input, and the parameters the
 * operators read, under stripped names ("fc1_w", not "cpu_0/fc1_w").
 *
 * Inputs and outputs are float32, row-major, with the batch as the first
 * dimension: input i of a run holds batch x dpm_predictor_input_size(p, i)
 * floats.
 *
 * Errors: every function that can fail returns a dpm_status and, when err is
 * non-NULL, a message for a person in err->msg naming the file and the
 * operator ("m/predictor.pb: op #2 (FC): parameter 'fc1_w' is f32[6,10],
 * the op expects f32[6,20]"). Loading validates the whole file before
 * anything runs, so a predictor that loaded can only fail to run for a batch
 * size the operators cannot take (DPM_SHAPE) or for lack of memory:
 *   DPM_NOT_FOUND    no predictor.pb in the directory (the message says so
 *                    when the directory holds an ONNX export, model.onnx)
 *   DPM_IO           the file cannot be read
 *   DPM_CORRUPT      not a PredictorDef (garbage, truncated), or one that is
 *                    inconsistent: a training-only (gradient, optimizer) op,
 *                    wrong arity, a bad argument, a blob no op computes, a
 *                    parameter missing, unused, of the wrong shape or with a
 *                    data size that does not match its dims and dtype
 *   DPM_UNSUPPORTED  a newer file version, an op this runtime does not know,
 *                    an output that is not float32
 *   DPM_INVALID      bad arguments to a call (NULL input, batch < 1, a name
 *                    that is not a device)
 *   DPM_SHAPE        the ops cannot run this batch size
 *   DPM_NOMEM        out of memory
 *   DPM_NOT_FOUND,   dpm_predictor_set_device: the device cannot be used (no
 *   DPM_UNSUPPORTED  such device, no driver, no backend for it in this
 *                    library, an op it has no kernel for), with the reason
 * A predictor on a device also fails a run with the device's own error when
 * the device faulted (such faults are sticky: later runs fail too).
 *
 * Ownership: dpm_predictor_load gives the caller a predictor that it frees
 * with dpm_predictor_free; nothing else is allocated for the caller. Strings
 * and output pointers returned by accessors belong to the predictor.
 *
 * Threads: a predictor is not thread-safe. Use one predictor per thread (on
 * the host they share nothing: load the same directory once per thread), or
 * serialise the calls on one predictor with a lock of your own. The
 * accessors that only read the file's description (names, shapes) may run
 * concurrently with each other but not with dpm_predictor_run. Predictors on
 * the same GPU share its streams and library handles: run them from one
 * thread, or serialise them; predictors on different GPUs, or one on a GPU
 * and others on the host, may run on different threads. The host kernels
 * call BLAS: set OPENBLAS_NUM_THREADS to choose how many threads one run
 * uses. */
#ifndef DPM_PREDICTOR_H
#define DPM_PREDICTOR_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The file name inside a predictor directory. */
#define DPM_PREDICTOR_FILE "predictor.pb"
/* The PredictorDef version this runtime writes and reads. */
#define DPM_PREDICTOR_VERSION 1

typedef struct dpm_predictor dpm_predictor;

/* Load and validate dir/predictor.pb. On success *out is a new predictor;
 * on failure *out is NULL and err says why. */
dpm_status dpm_predictor_load(const char *dir, dpm_predictor **out, dpm_err *err);

/* The same from a PredictorDef already in memory (len bytes at data, which
 * the predictor does not keep); `source` names it in messages (NULL:
 * "predictor"). */
dpm_status dpm_predictor_load_buffer(const void *data, size_t len, const char *source,
                                     dpm_predictor **out, dpm_err *err);

/* Run the predictor on `batch` examples (>= 1): inputs[i] holds batch x
 * dpm_predictor_input_size(p, i) floats, in the order of the file's inputs.
 * The inputs are copied; the caller keeps them. Changing the batch size
 * between runs is allowed (shapes are inferred again, buffers grow as
 * needed). On failure the outputs are undefined until the next good run. */
dpm_status dpm_predictor_run(dpm_predictor *p, const float *const *inputs, int batch,
                             dpm_err *err);

/* Where the predictor runs from now on: "cpu" or NULL, the host (where a
 * loaded predictor starts; "cpu:N" is the host too); "cuda:N", GPU N (the
 * first use loads the CUDA plugin, libdpm_cuda.so, as dpmd does: from
 * $DPM_CUDA_LIB, else next to the running program, one folder up, or in
 * ../lib/dpm/ from it); "fenced:N" in dpm's test builds only (a test device
 * whose memory host code cannot touch). On success the parameters have been
 * copied to the device (the host's copy is freed), and each later run
 * copies the inputs to it, runs there (float32 products, no TF32) and copies
 * the outputs back into host memory that dpm_predictor_output returns as
 * before; the last run's outputs are gone until the next run. Opened devices
 * stay open for the life of the process; predictors on one device share it.
 * On failure err names the device and why ("device cuda:0: no usable CUDA
 * driver or device: ..."), and the predictor is as it was: it still runs
 * where it ran, with its outputs. Moving back to "cpu" copies the
 * parameters back. */
dpm_status dpm_predictor_set_device(dpm_predictor *p, const char *device, dpm_err *err);

/* Output i of the last good run: its data (row-major float32) and, when
 * dims/ndim are non-NULL, its shape (dims[0] is the batch for outputs that
 * have one; ndim 0 is a scalar). Valid until the next run or free. NULL
 * (and *ndim 0) before the first good run or for i out of range. */
const float *dpm_predictor_output(const dpm_predictor *p, int i, int64_t dims[4],
                                  int *ndim);

/* The description from the file. Names are stripped blob names; NULL for an
 * index out of range. */
const char *dpm_predictor_name(const dpm_predictor *p); /* the model's name */
int dpm_predictor_num_inputs(const dpm_predictor *p);
int dpm_predictor_num_outputs(const dpm_predictor *p);
const char *dpm_predictor_input_name(const dpm_predictor *p, int i);
const char *dpm_predictor_output_name(const dpm_predictor *p, int i);
/* Shape of one example of input i (no batch dimension) into dims; returns
 * its number of dimensions (0..3), or -1 for i out of range. */
int dpm_predictor_input_shape(const dpm_predictor *p, int i, int64_t dims[3]);
/* Floats in one example of input i (the product of its shape), or -1. */
int64_t dpm_predictor_input_size(const dpm_predictor *p, int i);
/* The training reader's pixel scale: an image of raw pixel values (0..255
 * for IDX files) times this is what the first input expects. */
double dpm_predictor_input_scale(const dpm_predictor *p);
/* Number of operators run per batch (after the runtime's own fusion of an
 * in-place Relu into the FC or Conv before it). */
int dpm_predictor_num_ops(const dpm_predictor *p);

/* Free p and everything it owns; NULL is fine. */
void dpm_predictor_free(dpm_predictor *p);

#ifdef __cplusplus
}
#endif

#endif
