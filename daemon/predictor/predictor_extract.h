/* Predictor extraction: Caffe2's ExtractPredictorNet over a built model.
 *
 * From the model's test net (forward ops in test mode) it keeps exactly the
 * ops needed to compute the named outputs from the named inputs and the
 * parameters, writes them with every argument explicit, the inputs'
 * per-example shapes and the parameters those ops read (copied from the
 * master replica's workspace) into a PredictorDef (proto/dpm.proto), under
 * stripped names. The runtime that reads it is include/dpm/predictor.h.
 *
 * Which ops are kept: walking the test net backwards from the outputs, an op
 * is kept when it writes a blob still needed; its inputs then become needed,
 * except parameters (model kinds PARAM and COMPUTED). A listed input is the
 * blob's value as its producer left it: an op that writes a listed input
 * without reading it (FC -> fc1 when fc1 is an input) is where the predictor
 * starts, while in-place ops on it (Relu fc1 -> fc1) stay, as in Caffe2,
 * where the predictor begins at the first op reading its input. Fused ops
 * (engine/fuse.c) are expanded first: an FC or Conv carrying DPM_FUSE_RELU
 * is written as the op followed by an in-place Relu, so files hold the ops
 * of the spec and the runtime fuses them again.
 *
 * Errors (the message names the blob and, where there is one, the output):
 *   DPM_INVALID  no inputs or outputs, an empty or repeated name, an input
 *                that is no blob of the test net, is a parameter, is not
 *                float32 or has no batch dimension; an output that cannot be
 *                computed ("output 'loss' needs 'label', which is not an
 *                input") or is not float32; a kept op that overwrites a
 *                listed input; two names that strip to the same name
 *   DPM_NOT_FOUND a parameter the ops read is not in the workspace
 *   DPM_STATE    a workspace parameter's shape differs from the model's
 *   DPM_IO       the directory or file cannot be created or written
 *   DPM_NOMEM, and DPM_INTERNAL if the extracted file does not load back
 *
 * Threads: reads the model (immutable) and the workspace; the caller makes
 * sure no device worker writes that workspace meanwhile (between steps).
 * Nothing is shared between calls. */
#ifndef DPM_ENGINE_PREDICTOR_EXTRACT_H
#define DPM_ENGINE_PREDICTOR_EXTRACT_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/predictor.h"
#include "engine/model.h"
#include "engine/workspace.h"
#include "proto/dpm.pb-c.h"

/* The part of a blob name after its last '/' (Caffe2's stripParamName):
 * "cpu_1/fc1_w" -> "fc1_w"; a name without '/' is returned as is. The result
 * points into name. */
const char *dpm_strip_scope(const char *name);

/* The packed PredictorDef for (inputs -> outputs), in *buf (malloc'd, the
 * caller frees it) of *len bytes. ws holds the parameters (the master
 * replica's workspace, or one whose parent chain reaches them). */
dpm_status dpm_predictor_extract(const dpm_model *m, const dpm_workspace *ws,
                                 const char *const *inputs, int n_in,
                                 const char *const *outputs, int n_out, uint8_t **buf,
                                 size_t *len, dpm_err *err);

/* dpm_predictor_extract, checked by loading it back with the runtime, then
 * written to dir/predictor.pb atomically through fs (NULL: plain paths;
 * common/file.h): a temporary file in dir, fsynced, renamed over the old file,
 * and dir fsynced. dir (and its parents) are created when missing (mode
 * 0755). On failure no file is left behind and an earlier predictor.pb is
 * untouched. */
struct dpm_fs;
dpm_status dpm_predictor_export(const dpm_model *m, const dpm_workspace *ws,
                                const char *const *inputs, int n_in,
                                const char *const *outputs, int n_out,
                                const struct dpm_fs *fs, const char *dir, dpm_err *err);

#endif
