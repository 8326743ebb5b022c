/* Decoding requests within bounds (request.h). */
#include "server/request.h"

#include <stdlib.h>
#include <string.h>

#include "common/escape.h"
#include "common/pbcheck.h"
#include "common/validate.h"
#include "server/paths.h"

/* protobuf-c's allocator, counting what one unpack takes. Frees are plain
 * free(), so the message can be freed with the default allocator later. */
typedef struct {
  size_t used, limit;
  int refused; /* an allocation was refused: the bound, not the bytes, failed */
} budget;

static void *counted_alloc(void *data, size_t size) {
  budget *b = data;
  size_t cost = size + 32; /* malloc's own overhead, roughly */
  if (cost < size || cost > b->limit - b->used) {
    b->refused = 1;
    return NULL;
  }
  b->used += cost;
  return malloc(size);
}

static void plain_free(void *data, void *p) {
  (void)data;
  free(p);
}

dpm_status dpmd_request_decode(const uint8_t *buf, size_t len, size_t max_bytes,
                               Dpm__Request **out, dpm_err *err) {
  *out = NULL;
  if (len > max_bytes)
    return dpm_errf(err, DPM_DENIED, "request of %zu bytes; max_message_bytes is %zu",
                    len, max_bytes);
  char field[160];
  if (dpm_pb_check_strings(&dpm__request__descriptor, buf, len, field, sizeof field))
    return dpm_errf(err, DPM_INVALID, "request field '%s' holds a NUL byte", field);
  budget b = {.limit = DPMD_DECODE_SLACK + DPMD_DECODE_FACTOR * len};
  ProtobufCAllocator a = {.alloc = counted_alloc, .free = plain_free, .allocator_data = &b};
  *out = dpm__request__unpack(&a, len, buf);
  if (*out) return DPM_OK;
  if (b.refused)
    return dpm_errf(err, DPM_DENIED, "request of %zu bytes would take more than %zu bytes "
                                     "decoded", len, b.limit);
  return dpm_errf(err, DPM_CORRUPT, "not a dpm request (%zu bytes)", len);
}

/* ---- argument checks ----------------------------------------------------- */

/* Name, devices and checkpoint policy from a submit override its spec's
 * (moved from the request into the spec); a spec naming no devices gets
 * cpu:0. */
static dpm_status apply_overrides(Dpm__SubmitRequest *r, dpm_err *err) {
  Dpm__ModelSpec *spec = r->spec;
  if (r->name && *r->name) {
    char *t = spec->name;
    spec->name = r->name;
    r->name = t;
  }
  if (r->checkpoint) {
    if (dpm_checkpoint_policy_validate(r->checkpoint, err)) return err->code;
    Dpm__CheckpointPolicy *t = spec->checkpoint;
    spec->checkpoint = r->checkpoint;
    r->checkpoint = t;
  }
  if (!spec->parallel) {
    if (!(spec->parallel = malloc(sizeof *spec->parallel)))
      return dpm_errf(err, DPM_NOMEM, "out of memory");
    dpm__parallel_spec__init(spec->parallel);
  }
  Dpm__ParallelSpec *p = spec->parallel;
  if (r->n_devices) {
    char **t = p->devices;
    size_t n = p->n_devices;
    p->devices = r->devices, p->n_devices = r->n_devices;
    r->devices = t, r->n_devices = n;
  }
  if (!p->n_devices) {
    if (!(p->devices = malloc(sizeof *p->devices)) || !(p->devices[0] = strdup("cpu:0")))
      return dpm_errf(err, DPM_NOMEM, "out of memory");
    p->n_devices = 1;
  }
  if (!dpm_model_name_valid(spec->name)) {
    char b[80];
    return dpm_errf(err, DPM_INVALID,
                    "model name '%s': use 1-64 of A-Z a-z 0-9 . _ -, not starting with '.'",
                    dpm_escape(spec->name, b, sizeof b));
  }
  return DPM_OK;
}

dpm_status dpmd_request_check(const struct dpmd_paths *paths, Dpm__Request *rq,
                              dpm_err *err) {
  switch (rq->command_case) {
  case DPM__REQUEST__COMMAND_SUBMIT: return apply_overrides(rq->submit, err);
  case DPM__REQUEST__COMMAND_TRAIN:
    if (rq->train->iters == 0 || rq->train->iters > DPMD_MAX_ITERS)
      return dpm_errf(err, DPM_INVALID, "iters must be 1..2^40");
    return DPM_OK;
  case DPM__REQUEST__COMMAND_CHECKPOINT:
    return rq->checkpoint->out && *rq->checkpoint->out
               ? dpmd_paths_check(paths, rq->checkpoint->out, err)
               : DPM_OK;
  case DPM__REQUEST__COMMAND_LOAD: return dpmd_paths_check(paths, rq->load->path, err);
  case DPM__REQUEST__COMMAND_EXTRACT_PREDICTOR: {
    const Dpm__ExtractRequest *r = rq->extract_predictor;
    char b[80];
    if (strcmp(r->format, "dpm") != 0)
      return dpm_errf(err, DPM_UNSUPPORTED,
                      "predictor format '%s': this dpmd writes 'dpm' only",
                      dpm_escape(r->format, b, sizeof b));
    if (!r->n_inputs || !r->n_outputs)
      return dpm_errf(err, DPM_INVALID, "extract-predictor needs inputs and outputs");
    return dpmd_paths_check(paths, r->out, err);
  }
  default: return DPM_OK;
  }
}
