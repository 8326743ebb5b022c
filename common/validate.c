/* The model spec's one validation (validate.h): a walk over the sections,
 * each value checked against the limits in validate.h and the enums'
 * descriptors. */
#include "common/validate.h"

#include <assert.h>
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/device.h"
#include "common/escape.h"
#include "common/workcount.h"

typedef struct {
  char where[200]; /* "SOURCE:LINE: " or "SOURCE: ", escaped */
  dpm_err *err;
} vctx;

static dpm_status fail(vctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static dpm_status fail(vctx *c, const char *fmt, ...) {
  char msg[400];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  return dpm_errf(c->err, DPM_SPEC, "%s%s", c->where, msg);
}

/* Messages of a section point at its line when the spec came from a file. */
static void at(vctx *c, const Dpm__ModelSpec *spec, int has_line, uint32_t line) {
  char src[120];
  dpm_escape(spec->source ? spec->source : "spec", src, sizeof src);
  if (has_line && line)
    snprintf(c->where, sizeof c->where, "%s:%u: ", src, line);
  else
    snprintf(c->where, sizeof c->where, "%s: ", src);
}

static int enum_ok(const ProtobufCEnumDescriptor *d, int v) {
  return protobuf_c_enum_descriptor_get_value(d, v) != NULL;
}

int dpm_model_name_valid(const char *name) {
  size_t n = name ? strlen(name) : 0;
  return n > 0 && n <= DPM_SPEC_MAX_NAME && name[0] != '.' &&
         strspn(name,
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

int dpm_blob_name_valid(const char *name) {
  size_t n = name ? strlen(name) : 0;
  return n > 0 && n <= DPM_SPEC_MAX_BLOB_NAME && !dpm_has_control(name) &&
         !strchr(name, '/');
}

/* A quoted, escaped, shortened copy of a client string for a message. */
static const char *show(const char *s, char *buf, size_t cap) {
  char e[64];
  dpm_escape(s ? s : "", e, sizeof e);
  snprintf(buf, cap, "'%s'%s", e, s && strlen(s) > 40 ? "..." : "");
  return buf;
}

static dpm_status blob_names(vctx *c, const char *what, char *const *names, size_t n) {
  char b[80];
  for (size_t i = 0; i < n; i++)
    if (!dpm_blob_name_valid(names[i]))
      return fail(c,
                  "%s: blob name %s must be 1-%d bytes without control bytes or '/' ('/' "
                  "separates a replica's scope: cpu_1/fc1_w)",
                  what, show(names[i], b, sizeof b), DPM_SPEC_MAX_BLOB_NAME);
  return DPM_OK;
}

static dpm_status path(vctx *c, const char *what, const char *p) {
  char b[80];
  if (!p || !*p) return fail(c, "%s: no file named", what);
  if (dpm_has_control(p))
    return fail(c, "%s: file name %s holds control bytes", what, show(p, b, sizeof b));
  return DPM_OK;
}

int dpm_reader_kind_is_image(Dpm__ReaderKind k) {
  return k == DPM__READER_KIND__READER_TAR || k == DPM__READER_KIND__READER_LMDB ||
         k == DPM__READER_KIND__READER_FOLDER;
}

/* An image reader's files: tar its shards, lmdb and folder one path. */
static dpm_status image_files(vctx *c, const char *sec, Dpm__ReaderKind k, char **shards,
                              size_t n_shards, const char *p) {
  char what[40];
  if (k != DPM__READER_KIND__READER_TAR) {
    snprintf(what, sizeof what, "%s.path", sec);
    return path(c, what, p);
  }
  if (n_shards < 1 || n_shards > DPM_SPEC_MAX_SHARD_FILES)
    return fail(c, "%s.shards must name 1..%d files, got %zu", sec,
                DPM_SPEC_MAX_SHARD_FILES, n_shards);
  snprintf(what, sizeof what, "%s.shards", sec);
  for (size_t i = 0; i < n_shards; i++)
    if (path(c, what, shards[i])) return c->err->code;
  return DPM_OK;
}

static int finite_in(const double *v, size_t n, double lo, double hi) {
  for (size_t i = 0; i < n; i++)
    if (!(isfinite(v[i]) && v[i] >= lo && v[i] <= hi)) return 0;
  return 1;
}

static dpm_status image(vctx *c, const Dpm__ImageSpec *im) {
  if (!im) return fail(c, "input.image: missing (an image reader needs its crop)");
  if (im->channels != 1 && im->channels != 3)
    return fail(c, "input.image.channels must be 1 or 3, got %u", im->channels);
  if (im->crop < 1 || im->crop > DPM_SPEC_MAX_CROP)
    return fail(c, "input.image.crop must be 1..%d, got %u", DPM_SPEC_MAX_CROP, im->crop);
  if (im->has_resize && (im->resize < im->crop || im->resize > DPM_SPEC_MAX_CROP))
    return fail(c, "input.image.resize must be crop..%d, got %u", DPM_SPEC_MAX_CROP,
                im->resize);
  if (!(im->area_min > 0 && im->area_min <= im->area_max && im->area_max <= 1))
    return fail(c, "input.image: need 0 < area_min <= area_max <= 1");
  if (!(im->aspect_min > 0 && im->aspect_min <= im->aspect_max &&
        isfinite(im->aspect_max)))
    return fail(c, "input.image: need 0 < aspect_min <= aspect_max, finite");
  if ((im->n_mean && im->n_mean != 1 && im->n_mean != im->channels) ||
      (im->n_std && im->n_std != 1 && im->n_std != im->channels))
    return fail(c, "input.image.mean and std must hold 1 or channels numbers");
  if (!finite_in(im->mean, im->n_mean, -65536, 65536) ||
      !finite_in(im->std, im->n_std, 1e-6, 65536))
    return fail(c, "input.image: mean must be finite, std finite and > 0");
  if (im->decode_threads < 1 || im->decode_threads > DPM_SPEC_MAX_DECODE_THREADS)
    return fail(c, "input.image.decode_threads must be 1..%d, got %u",
                DPM_SPEC_MAX_DECODE_THREADS, im->decode_threads);
  if (im->max_pixels < 1 || im->max_pixels > DPM_SPEC_MAX_IMAGE_PIXELS)
    return fail(c, "input.image.max_pixels must be 1..%llu",
                (unsigned long long)DPM_SPEC_MAX_IMAGE_PIXELS);
  return DPM_OK;
}

static dpm_status input(vctx *c, const Dpm__InputSpec *in, uint64_t devices) {
  if (!in) return fail(c, "no input section");
  if (!enum_ok(&dpm__reader_kind__descriptor, in->reader))
    return fail(c, "input.reader: unknown reader %d (idx, synthetic, tar, lmdb, folder)",
                (int)in->reader);
  if (in->reader == DPM__READER_KIND__READER_IDX &&
      (path(c, "input.images", in->images) || path(c, "input.labels", in->labels)))
    return c->err->code;
  if (dpm_reader_kind_is_image(in->reader) &&
      (image_files(c, "input", in->reader, in->shards, in->n_shards, in->path) ||
       image(c, in->image)))
    return c->err->code;
  if (!enum_ok(&dpm__bad_sample__descriptor, in->on_bad_sample))
    return fail(c, "input.on_bad_sample: unknown value %d (fail, skip)",
                (int)in->on_bad_sample);
  if (in->batch_size < 1 || in->batch_size > DPM_SPEC_MAX_BATCH)
    return fail(c, "input.batch_size must be 1..%u, got %u", DPM_SPEC_MAX_BATCH,
                in->batch_size);
  if (in->num_shards < 1 || in->shard_id >= in->num_shards)
    return fail(c, "input: shard_id %u must be below num_shards %u (>= 1)", in->shard_id,
                in->num_shards);
  if ((uint64_t)in->batch_size * devices * in->num_shards > DPM_SPEC_MAX_GLOBAL)
    return fail(c, "input: batch_size x devices x num_shards must be at most %u",
                DPM_SPEC_MAX_GLOBAL);
  if (!(isfinite(in->scale) && in->scale > 0 && in->scale <= DPM_SPEC_MAX_SCALE))
    return fail(c, "input.scale must be a number > 0 and at most %g, got %g",
                DPM_SPEC_MAX_SCALE, in->scale);
  if (in->prefetch < 1 || in->prefetch > DPM_SPEC_MAX_PREFETCH)
    return fail(c, "input.prefetch must be 1..%d, got %u", DPM_SPEC_MAX_PREFETCH,
                in->prefetch);
  if (in->num_classes < 1 || in->num_classes > DPM_SPEC_MAX_CLASSES)
    return fail(c, "input.num_classes must be 1..%u, got %u", DPM_SPEC_MAX_CLASSES,
                in->num_classes);
  if (in->num_examples < 1 || in->num_examples > DPM_SPEC_MAX_EXAMPLES)
    return fail(c, "input.num_examples must be 1..%d, got %u", DPM_SPEC_MAX_EXAMPLES,
                in->num_examples);
  if (in->n_shape != 0 && in->n_shape != 3)
    return fail(c, "input.shape must be [C, H, W], got %zu entries", in->n_shape);
  uint64_t pixels = 1;
  for (size_t i = 0; i < in->n_shape; i++) {
    if (in->shape[i] < 1 || in->shape[i] > DPM_SPEC_MAX_SIDE)
      return fail(c, "input.shape entries must be 1..%d, got %u", DPM_SPEC_MAX_SIDE,
                  in->shape[i]);
    pixels *= in->shape[i];
  }
  if (pixels > DPM_SPEC_MAX_PIXELS)
    return fail(c, "input.shape: C x H x W must be at most %u", DPM_SPEC_MAX_PIXELS);
  if (in->n_outputs != 2) return fail(c, "input.outputs must name 2 blobs (data, label)");
  if (blob_names(c, "input.outputs", in->outputs, 2)) return c->err->code;
  if (!strcmp(in->outputs[0], in->outputs[1]))
    return fail(c, "input.outputs must name 2 different blobs");
  return DPM_OK;
}

static dpm_status forward(vctx *c, const Dpm__ModelSpec *spec) {
  char b[80], what[64];
  if (!spec->n_forward) return fail(c, "forward: no operators");
  for (size_t i = 0; i < spec->n_forward; i++) {
    const Dpm__Operator *op = spec->forward[i];
    snprintf(what, sizeof what, "op #%zu", i + 1);
    if (!op->type[0] || dpm_has_control(op->type))
      return fail(c, "%s: op type %s is not a name", what, show(op->type, b, sizeof b));
    if (!op->n_output) return fail(c, "%s: no outputs", what);
    if (blob_names(c, what, op->input, op->n_input) ||
        blob_names(c, what, op->output, op->n_output))
      return c->err->code;
    for (size_t a = 0; a < op->n_arg; a++) {
      const Dpm__Argument *arg = op->arg[a];
      if (!arg->name[0] || dpm_has_control(arg->name))
        return fail(c, "%s: argument name %s is not a name", what,
                    show(arg->name, b, sizeof b));
      if (arg->value_case == DPM__ARGUMENT__VALUE__NOT_SET)
        return fail(c, "%s: argument '%s' has no value", what, arg->name);
      if (arg->value_case == DPM__ARGUMENT__VALUE_S && dpm_has_control(arg->s))
        return fail(c, "%s: argument '%s' holds control bytes", what, arg->name);
    }
  }
  return DPM_OK;
}

static dpm_status losses(vctx *c, const Dpm__ModelSpec *spec) {
  if (!spec->n_losses) return fail(c, "losses: name at least one blob");
  if (blob_names(c, "losses", spec->losses, spec->n_losses)) return c->err->code;
  for (size_t i = 0; i < spec->n_losses; i++)
    for (size_t j = 0; j < i; j++)
      if (!strcmp(spec->losses[i], spec->losses[j]))
        return fail(c, "losses: '%s' is listed twice", spec->losses[i]);
  return DPM_OK;
}

/* a <= x (< or <=) b, finite */
static int in_range(double x, double a, double b, int b_open) {
  return isfinite(x) && x >= a && (b_open ? x < b : x <= b);
}

static dpm_status lr(vctx *c, const Dpm__LrSpec *l) {
  if (!in_range(l->base_lr, 0, INFINITY, 0))
    return fail(c, "update.lr.base must be a finite number >= 0");
  if (!enum_ok(&dpm__lr_policy__descriptor, l->policy))
    return fail(c, "update.lr.policy: unknown policy %d", (int)l->policy);
  if (l->stepsize < 1) return fail(c, "update.lr.stepsize must be >= 1");
  if (!(isfinite(l->gamma) && l->gamma > 0))
    return fail(c, "update.lr.gamma must be a finite number > 0");
  if (!isfinite(l->power)) return fail(c, "update.lr.power must be a finite number");
  for (size_t i = 0; i < l->n_stepvalues; i++)
    if (l->stepvalues[i] < 1 || (i && l->stepvalues[i] <= l->stepvalues[i - 1]))
      return fail(c, "update.lr.stepvalues must be increasing and >= 1");
  if (l->policy == DPM__LR_POLICY__LR_MULTISTEP && !l->n_stepvalues)
    return fail(c, "update.lr: policy multistep needs stepvalues");
  if (l->policy == DPM__LR_POLICY__LR_POLY && l->max_iter < 1)
    return fail(c, "update.lr: policy poly needs max_iter >= 1");
  if (!in_range(l->start_multiplier, 0, 1, 0))
    return fail(c, "update.lr.start_multiplier must be in [0, 1]");
  return DPM_OK;
}

static dpm_status update(vctx *c, const Dpm__UpdateSpec *u) {
  if (!enum_ok(&dpm__optimizer__descriptor, u->optimizer))
    return fail(c, "update.optimizer: unknown optimizer %d", (int)u->optimizer);
  if (!in_range(u->momentum, 0, 1, 1))
    return fail(c, "update.momentum must be in [0, 1)");
  if (!in_range(u->weight_decay, 0, INFINITY, 0))
    return fail(c, "update.weight_decay must be a finite number >= 0");
  if (!in_range(u->beta1, 0, 1, 1) || !in_range(u->beta2, 0, 1, 1))
    return fail(c, "update.beta1 and beta2 must be in [0, 1)");
  if (!(isfinite(u->epsilon) && u->epsilon > 0))
    return fail(c, "update.epsilon must be a finite number > 0");
  return u->lr ? lr(c, u->lr) : DPM_OK;
}

static dpm_status eval(vctx *c, const Dpm__EvalSpec *e) {
  if (!enum_ok(&dpm__reader_kind__descriptor, e->reader) ||
      e->reader == DPM__READER_KIND__READER_SYNTHETIC)
    return fail(c, "eval.reader: must be idx, tar, lmdb or folder");
  if (dpm_reader_kind_is_image(e->reader)) {
    if (image_files(c, "eval", e->reader, e->shards, e->n_shards, e->path))
      return c->err->code;
  } else if (path(c, "eval.images", e->images) || path(c, "eval.labels", e->labels)) {
    return c->err->code;
  }
  if (e->batch_size < 1 || e->batch_size > DPM_SPEC_MAX_BATCH)
    return fail(c, "eval.batch_size must be 1..%u, got %u", DPM_SPEC_MAX_BATCH,
                e->batch_size);
  return DPM_OK;
}

/* parallel.devices: each name parsed once into devs[i] (given: devs holds
 * them parsed already, and only the list's rules are checked), canonical,
 * of one kind, each once. */
static dpm_status devices(vctx *c, const Dpm__ParallelSpec *p, dpm_device *devs,
                          int given) {
  char b[80];
  if (p->n_devices > DPM_MAX_DEVICES)
    return fail(c, "parallel.devices: more than %d devices", DPM_MAX_DEVICES);
  if (!p->n_devices) return DPM_OK;
  char seen[DPM_DEVICE_KIND_COUNT][DPM_MAX_DEVICE_INDEX + 1];
  memset(seen, 0, sizeof seen);
  dpm_device first = {0};
  for (size_t i = 0; i < p->n_devices; i++) {
    dpm_device d;
    if (given)
      assert((unsigned)(d = devs[i]).kind < DPM_DEVICE_KIND_COUNT &&
             (unsigned)d.index <= DPM_MAX_DEVICE_INDEX);
    else if (dpm_device_parse(p->devices[i], &d))
      return fail(c, "parallel.devices: %s is not a device (cpu:N or cuda:N, N 0..%d)%s",
                  show(p->devices[i], b, sizeof b), DPM_MAX_DEVICE_INDEX,
                  dpm_device_hint(p->devices[i]));
    if (!i) first = d;
    if (d.kind != first.kind)
      return fail(c, "parallel.devices: one kind of device per model, got %s and %s",
                  p->devices[0], p->devices[i]);
    if (seen[d.kind][d.index]++)
      return fail(c, "parallel.devices: %s is listed twice", p->devices[i]);
    if (devs) devs[i] = d;
  }
  return DPM_OK;
}

static dpm_status parallel(vctx *c, const Dpm__ParallelSpec *p, dpm_device *devs,
                           int given) {
  if (devices(c, p, devs, given)) return c->err->code;
  if (!enum_ok(&dpm__net_type__descriptor, p->net_type))
    return fail(c, "parallel.net_type: unknown net type %d (dag, simple)",
                (int)p->net_type);
  if (!enum_ok(&dpm__parallel_mode__descriptor, p->mode))
    return fail(c, "parallel.mode: unknown mode %d (sync, bmuf)", (int)p->mode);
  const Dpm__BmufSpec *bm = p->bmuf;
  if (p->mode == DPM__PARALLEL_MODE__PARALLEL_BMUF && p->combine_spatial_bn)
    return fail(c,
                "parallel.combine_spatial_bn all-reduces every step, parallel.mode bmuf "
                "once per block: choose one");
  if (bm && p->mode != DPM__PARALLEL_MODE__PARALLEL_BMUF)
    return fail(c, "parallel.bmuf is given but parallel.mode is not bmuf");
  if (bm && bm->has_block_momentum &&
      !(bm->block_momentum >= 0 && bm->block_momentum < 1))
    return fail(c, "parallel.bmuf.block_momentum must be in [0, 1), got %g",
                bm->block_momentum);
  if (bm && !(isfinite(bm->block_learning_rate) && bm->block_learning_rate > 0))
    return fail(c,
                "parallel.bmuf.block_learning_rate must be a finite number > 0, got %g",
                bm->block_learning_rate);
  if (bm && bm->local_steps < 1)
    return fail(c, "parallel.bmuf.local_steps must be >= 1, got %u", bm->local_steps);
  if (p->n_shards > DPM_SPEC_MAX_SHARDS)
    return fail(c, "parallel.shards: %zu daemons, at most %u", p->n_shards,
                DPM_SPEC_MAX_SHARDS);
  for (size_t i = 0; i < p->n_shards; i++) {
    if (!dpm_shard_endpoint_valid(p->shards[i]))
      return fail(c, "parallel.shards[%zu] is not tcp://HOST:PORT or ipc:///PATH", i);
    for (size_t j = 0; j < i; j++)
      if (!strcmp(p->shards[i], p->shards[j]))
        return fail(c, "parallel.shards: entries %zu and %zu name the same daemon", j, i);
  }
  const Dpm__Rendezvous *r = p->rendezvous;
  if (r) {
    if (r->store && !dpm_store_url_valid(r->store))
      return fail(c, "parallel.rendezvous.store is not daemon, redis://HOST:PORT or "
                     "file:///DIR");
    if (r->interface && !dpm_interface_name_valid(r->interface))
      return fail(c, "parallel.rendezvous.interface is not a network interface name");
    if (r->timeout_ms < 1 || r->timeout_ms > DPM_SPEC_MAX_TIMEOUT_MS)
      return fail(c, "parallel.rendezvous.timeout_ms %u is outside [1, %u]",
                  r->timeout_ms, DPM_SPEC_MAX_TIMEOUT_MS);
  }
  return DPM_OK;
}

/* HOST:PORT at s: a host of [A-Za-z0-9.-] (or a bracketed IPv6 address),
 * a port of 1..65535, nothing after. */
static int host_port_valid(const char *s) {
  const char *colon = strrchr(s, ':');
  if (!colon || colon == s || colon - s > 253) return 0;
  if (s[0] == '[') {
    if (colon[-1] != ']' || colon - s < 3) return 0;
    for (const char *q = s + 1; q < colon - 1; q++)
      if (!strchr("0123456789abcdefABCDEF:.", *q)) return 0;
  } else {
    for (const char *q = s; q < colon; q++)
      if (!(isalnum((unsigned char)*q) || *q == '.' || *q == '-')) return 0;
  }
  size_t n = strspn(colon + 1, "0123456789");
  if (n < 1 || n > 5 || colon[1 + n]) return 0;
  long port = strtol(colon + 1, NULL, 10);
  return port >= 1 && port <= 65535;
}

/* An absolute path of at most 200 bytes without control bytes. */
static int abs_path_valid(const char *s) {
  return s[0] == '/' && strlen(s) <= 200 && !dpm_has_control(s);
}

int dpm_shard_endpoint_valid(const char *ep) {
  if (!strncmp(ep, "tcp://", 6)) return host_port_valid(ep + 6);
  if (!strncmp(ep, "ipc://", 6)) return abs_path_valid(ep + 6);
  return 0;
}

int dpm_store_url_valid(const char *url) {
  if (!strcmp(url, "daemon")) return 1;
  if (!strncmp(url, "redis://", 8)) return host_port_valid(url + 8);
  if (!strncmp(url, "file://", 7)) return abs_path_valid(url + 7);
  return 0;
}

int dpm_interface_name_valid(const char *name) {
  size_t n = strlen(name);
  if (n < 1 || n > 15 || !strcmp(name, ".") || !strcmp(name, "..")) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(isalnum((unsigned char)name[i]) || strchr("._-@", name[i]))) return 0;
  return 1;
}

int dpm_checkpoint_every_parse(const char *s, Dpm__CheckpointPolicy *p) {
  size_t n = s ? strspn(s, "0123456789") : 0;
  int seconds = n && s[n] == 's' && !s[n + 1];
  if (!n || n > 9 || (s[n] && !seconds)) return -1;
  uint64_t v = strtoull(s, NULL, 10);
  p->has_every_iters = !seconds;
  p->every_iters = seconds ? 0 : v;
  p->has_every_seconds = seconds;
  p->every_seconds = seconds ? (double)v : 0;
  return 0;
}

dpm_status dpm_checkpoint_policy_validate(const Dpm__CheckpointPolicy *p, dpm_err *err) {
  if (p && p->has_every_seconds && !in_range(p->every_seconds, 0, 1e9, 0))
    return dpm_errf(err, DPM_SPEC, "checkpoint_every: seconds must be 0..1e9");
  return DPM_OK;
}

dpm_status dpm_spec_validate_devices(const Dpm__ModelSpec *spec, dpm_device *devs,
                                     int given, dpm_err *err) {
  dpm_err ignored;
  if (!err) err = &ignored;
  DPM_WORK_DONE(DPM_WORK_SPEC_VALIDATE);
  vctx c = {.err = err};
  char b[80];
  if (!spec) return dpm_errf(err, DPM_SPEC, "no spec");
  at(&c, spec, 0, 0);
  if (!dpm_model_name_valid(spec->name))
    return fail(&c, "name %s: use 1-%d of A-Z a-z 0-9 . _ -, not starting with '.'",
                show(spec->name, b, sizeof b), DPM_SPEC_MAX_NAME);
  uint64_t devices =
      spec->parallel && spec->parallel->n_devices ? spec->parallel->n_devices : 1;
  if (spec->input) at(&c, spec, spec->input->has_line, spec->input->line);
  if (input(&c, spec->input, devices)) return err->code;
  at(&c, spec, 0, 0);
  if (forward(&c, spec) || losses(&c, spec)) return err->code;
  if (spec->update) {
    at(&c, spec, spec->update->has_line, spec->update->line);
    if (update(&c, spec->update)) return err->code;
  }
  if (spec->eval) {
    at(&c, spec, spec->eval->has_line, spec->eval->line);
    if (eval(&c, spec->eval)) return err->code;
    if (dpm_reader_kind_is_image(spec->eval->reader) && !(spec->input && spec->input->image))
      return fail(&c, "eval.reader: an image reader takes its crop from input.image");
  }
  at(&c, spec, 0, 0);
  if (spec->parallel && parallel(&c, spec->parallel, devs, given)) return err->code;
  if (dpm_checkpoint_policy_validate(spec->checkpoint, err))
    return dpm_err_prefix(err, "%s", c.where);
  return DPM_OK;
}

dpm_status dpm_spec_validate(const Dpm__ModelSpec *spec, dpm_err *err) {
  return dpm_spec_validate_devices(spec, NULL, 0, err);
}
