/* ONNX export of a predictor: the ops of an extracted PredictorDef
 * (predictor/predictor_extract.h) written as an ONNX model (IR version 8,
 * opset 17 of the default domain) with protobuf-c code generated from
 * proto/onnx.proto.
 *
 * The model: graph named after the model, one graph input per predictor
 * input (float, batch dimension the symbol "N", the rest fixed), one
 * output per predictor output, the parameters as float initializers
 * (raw_data, little-endian) that are not graph inputs, and one or more
 * nodes per op in the predictor's order (which is topological). dpm runs
 * ops in place (Relu fc1 -> fc1); ONNX values are assigned once, so every
 * write of a blob but the last gets a fresh name ("fc1__1"), and the last
 * one, which outputs read, keeps the blob's name. metadata_props holds
 * "dpm.input_scale" (raw pixel -> input value, what `dpmctl predict`
 * multiplies pixels by before they enter the model).
 *
 * Op mapping (dpm semantics -> ONNX):
 *   FC                  Gemm(X, W, b, transB=1), X [N, ...] flattened at
 *                       axis 1 first (Flatten) when it has more than 2 dims
 *   Conv                Conv, kernel_shape [k,k], strides [s,s], pads
 *                       [p,p,p,p], dilations [1,1], group 1
 *   MaxPool             MaxPool (floor: ceil_mode 0), output 0 only
 *   AveragePool         AveragePool, count_include_pad 0 (dpm divides by the
 *                       in-bounds count), ceil_mode 0
 *   SpatialBN (test)    BatchNormalization-15 (X, scale, bias, running mean,
 *                       running variance: dpm's "_riv" holds a variance),
 *                       epsilon, inference mode
 *   Relu Sigmoid Tanh   the same op; a fused Relu is already a separate op
 *                       in the predictor file
 *   Softmax             Softmax(axis=1) on [N, D]; dpm normalises over
 *                       every dimension after the first, so a larger input
 *                       is Flatten(1) -> Softmax(1) -> Reshape([0, d1..])
 *   Flatten             Flatten(axis)
 *   Reshape             Reshape(X, shape as an INT64 initializer); 0 and -1
 *                       mean what they mean in dpm (allowzero 0)
 *   Concat              Concat(axis)
 *   Add, Sum            Add, Sum (dpm's inputs have equal shapes)
 *   Scale               Mul(X, a float scalar initializer) (ONNX's Scale is
 *                       experimental, never written)
 *   Copy, StopGradient, Identity
 *   Dropout (test)
 * Hidden outputs (MaxPool's argmax, SpatialBN's saved statistics, Dropout's
 * mask) are not written; a predictor reading one cannot be exported.
 *
 * Errors: DPM_UNSUPPORTED for an op with no mapping ("op #3 (Accuracy) has
 * no ONNX form"), a hidden output that is read, an output that no op
 * computes (an input or a parameter); DPM_CORRUPT for a PredictorDef that
 * does not parse or whose ops do not infer; DPM_NOMEM; the writer adds
 * what dpm_predictor_extract and common/file.h give.
 *
 * Threads: nothing shared between calls; the model and workspace are read
 * as dpm_predictor_extract reads them (between steps). */
#ifndef DPM_ENGINE_ONNX_EXPORT_H
#define DPM_ENGINE_ONNX_EXPORT_H

#include <stddef.h>
#include <stdint.h>

#include "engine/model.h"
#include "engine/workspace.h"

/* The file name inside the export directory. */
#define DPM_ONNX_FILE "model.onnx"
#define DPM_ONNX_IR_VERSION 8
#define DPM_ONNX_OPSET 17

/* The packed ONNX ModelProto for the packed PredictorDef (def, def_len), in
 * *buf (malloc'd, the caller frees it) of *len bytes. */
dpm_status dpm_onnx_from_predictor(const uint8_t *def, size_t def_len, uint8_t **buf,
                                   size_t *len, dpm_err *err);

/* dpm_predictor_extract for (inputs -> outputs), checked by loading it with
 * the predictor runtime, converted by dpm_onnx_from_predictor and written to
 * dir/model.onnx atomically through fs (NULL: plain paths; common/file.h),
 * creating dir when missing. Only model.onnx is written. */
struct dpm_fs;
dpm_status dpm_onnx_export(const dpm_model *m, const dpm_workspace *ws,
                           const char *const *inputs, int n_in,
                           const char *const *outputs, int n_out, const struct dpm_fs *fs,
                           const char *dir, dpm_err *err);

#endif
