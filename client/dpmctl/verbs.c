/* dpmctl's verb table (the one place verbs are declared: name, usage,
 * positional counts, options, handler, whether the daemon is needed) and
 * the handlers of the verbs that are one request and one response (their
 * calls: call.c).
 *
 * Paths sent to the daemon (checkpoint --out, load FILE, extract-predictor
 * --out, the spec's data files) are made absolute against dpmctl's working
 * directory: the daemon runs elsewhere and only takes absolute paths.
 *
 * Long verbs (the daemon answers when the work is done: submit, checkpoint,
 * load, sync, eval, extract-predictor, get-blob, shutdown) first ping the
 * daemon within --timeout, so that an absent daemon is reported as quickly
 * as for any verb and the client knows the daemon's instance, then wait for
 * the answer max(--timeout, 120 s). While they wait the library pings: a
 * daemon that dies or restarts fails the verb with exit 3 within seconds
 * (include/dpm/client.h, Liveness). */
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/clock.h"
#include "common/spec.h"
#include "dpmctl/dpmctl.h"

/* ---- helpers ---- */

/* Sends req and prints the answer (ok_text: the human line of an answer
 * without a result). */
static int call_print(ctl_ctx *ctx, Dpm__Request *req, const char *ok_text) {
  Dpm__Response *r;
  int rc = ctl_call(ctx, req, &r);
  if (rc) return rc;
  rc = ctl_print_response(ctx, r, ok_text);
  dpm_client_free_response(r);
  return rc;
}

static int long_call_print(ctl_ctx *ctx, Dpm__Request *req, const char *ok_text) {
  Dpm__Response *r;
  int rc = ctl_long_call(ctx, req, &r);
  if (rc) return rc;
  rc = ctl_print_response(ctx, r, ok_text);
  dpm_client_free_response(r);
  return rc;
}

/* A new absolute, lexically normalised ("." and ".." resolved) copy of path
 * against the working directory; NULL when out of memory or no cwd. */
static char *absolute(const char *path) {
  char *cwd = NULL;
  if (path[0] != '/' && !(cwd = getcwd(NULL, 0))) return NULL;
  size_t n = (cwd ? strlen(cwd) : 0) + strlen(path) + 2;
  char *joined = malloc(n), *outp = malloc(n);
  if (!joined || !outp) {
    free(cwd);
    free(joined);
    free(outp);
    return NULL;
  }
  snprintf(joined, n, "%s/%s", cwd ? cwd : "", path);
  free(cwd);
  size_t len = 0;
  for (char *save = NULL, *part = strtok_r(joined, "/", &save); part;
       part = strtok_r(NULL, "/", &save)) {
    if (!strcmp(part, ".")) continue;
    if (!strcmp(part, "..")) {
      while (len > 0 && outp[len - 1] != '/') len--;
      if (len > 0) len--; /* the slash */
      continue;
    }
    outp[len++] = '/';
    size_t pl = strlen(part);
    memcpy(outp + len, part, pl);
    len += pl;
  }
  if (len == 0) outp[len++] = '/';
  outp[len] = 0;
  free(joined);
  return outp;
}

/* *field (a malloc'd string or NULL) made absolute in place. */
static int absolutize(char **field) {
  if (!*field || !**field || (*field)[0] == '/') return 0;
  char *a = absolute(*field);
  if (!a) return -1;
  free(*field);
  *field = a;
  return 0;
}

static int no_memory(ctl_ctx *ctx) {
  ctl_error(ctx, "NOMEM", "out of memory");
  return CTL_FAILED;
}

static int usage_error(ctl_ctx *ctx, const char *msg) {
  ctl_error(ctx, "USAGE", "%s", msg);
  ctl_usage_short(stderr, ctx->a->verb);
  return CTL_USAGE;
}

static const char *pos(const ctl_ctx *ctx, int i) {
  return i < ctx->a->npos ? ctx->a->pos[i] : NULL;
}

/* ---- handlers ---- */

static Dpm__Empty empty_msg = DPM__EMPTY__INIT;

static int cmd_ping(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_PING;
  req.ping = &empty_msg;
  int64_t t0 = dpm_mono_ns();
  Dpm__Response *r;
  int rc = ctl_call(ctx, &req, &r);
  if (rc) return rc;
  double ms = (double)(dpm_mono_ns() - t0) / 1e6;
  rc = ctl_print_ping(ctx, r, ms);
  dpm_client_free_response(r);
  return rc;
}

static int cmd_version(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_VERSION_INFO;
  req.version_info = &empty_msg;
  return call_print(ctx, &req, NULL);
}

static int cmd_submit(ctl_ctx *ctx) {
  const char *path = pos(ctx, 0);
  Dpm__CheckpointPolicy policy = DPM__CHECKPOINT_POLICY__INIT;
  const char *every = ctx->a->opt[O_CHECKPOINT_EVERY];
  if (every) {
    if (ctl_parse_checkpoint_every(every, &policy.every_iters, &policy.every_seconds))
      return usage_error(ctx, "--checkpoint-every takes iterations (1000) or seconds "
                              "(600s); 0 disables");
    policy.has_every_iters = policy.has_every_seconds = 1; /* both: 0 is never */
  }
  Dpm__ModelSpec *spec = NULL;
  dpm_err err = {0};
  dpm_status s = dpm_spec_load(path, &spec, &err);
  if (s) {
    ctl_error(ctx, dpm_status_name(s), "%s", err.msg);
    return CTL_FAILED;
  }
  int rc;
  char **devices = NULL;
  size_t n_devices = 0;
  const char *dev = ctx->a->opt[O_DEVICES];
  if (dev && ctl_split(dev, &devices, &n_devices)) {
    dpm_spec_free(spec);
    return usage_error(ctx, "--devices takes a list such as cpu:0,cpu:1");
  }
  char **shards = NULL; /* the daemons of a fleet job; the first is the endpoint */
  size_t n_shards = 0;
  const char *sh = ctx->a->opt[O_SHARDS];
  if (sh && ctl_split(sh, &shards, &n_shards)) {
    ctl_free_list(devices, n_devices);
    dpm_spec_free(spec);
    return usage_error(ctx, "--shards takes a list such as tcp://10.0.0.1:7070,"
                            "tcp://10.0.0.2:7070");
  }
  if ((spec->input &&
       (absolutize(&spec->input->images) || absolutize(&spec->input->labels))) ||
      (spec->eval &&
       (absolutize(&spec->eval->images) || absolutize(&spec->eval->labels))) ||
      absolutize(&spec->source)) {
    rc = no_memory(ctx);
  } else {
    Dpm__SubmitRequest sub = DPM__SUBMIT_REQUEST__INIT;
    sub.spec = spec;
    sub.name = (char *)ctx->a->opt[O_NAME];
    sub.devices = devices;
    sub.n_devices = n_devices;
    sub.checkpoint = every ? &policy : NULL;
    sub.shards = shards;
    sub.n_shards = n_shards;
    Dpm__Request req = DPM__REQUEST__INIT;
    req.command_case = DPM__REQUEST__COMMAND_SUBMIT;
    req.submit = &sub;
    rc = long_call_print(ctx, &req, NULL);
  }
  ctl_free_list(devices, n_devices);
  ctl_free_list(shards, n_shards);
  dpm_spec_free(spec);
  return rc;
}

/* --iters N, or --epochs N (the daemon turns them into steps). */
static int cmd_train(ctl_ctx *ctx) {
  const char *it = ctx->a->opt[O_ITERS], *ep = ctx->a->opt[O_EPOCHS];
  if (!it == !ep)
    return usage_error(ctx, "train takes --iters N or --epochs N (one of them)");
  uint64_t n;
  if (ctl_parse_u64(it ? it : ep, UINT64_MAX, &n) || n == 0)
    return usage_error(ctx, it ? "--iters takes a positive whole number"
                               : "--epochs takes a positive whole number");
  Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
  tr.name = (char *)pos(ctx, 0);
  if (it) {
    tr.iters = n;
  } else {
    tr.has_epochs = 1;
    tr.epochs = n;
  }
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_TRAIN;
  req.train = &tr;
  if (!ctx->a->opt[O_WAIT]) return call_print(ctx, &req, NULL);
  tr.has_wait = 1;
  tr.wait = 1;
  Dpm__Response *r;
  int rc = ctl_train_wait(ctx, &req, &r);
  if (rc) return rc;
  rc = ctl_print_response(ctx, r, NULL);
  dpm_client_free_response(r);
  return rc;
}

/* The NameRequest verbs. */
static int name_verb(ctl_ctx *ctx, Dpm__Request__CommandCase c, const char *ok_fmt,
                     int long_running) {
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = (char *)pos(ctx, 0);
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = c;
  switch (c) {
  case DPM__REQUEST__COMMAND_STATUS:
    req.status = &nr;
    break;
  case DPM__REQUEST__COMMAND_SYNC:
    req.sync = &nr;
    break;
  case DPM__REQUEST__COMMAND_EVAL:
    req.eval = &nr;
    break;
  case DPM__REQUEST__COMMAND_PAUSE:
    req.pause = &nr;
    break;
  case DPM__REQUEST__COMMAND_DELETE:
    req.delete_ = &nr;
    break;
  default:
    return CTL_FAILED;
  }
  char ok[512];
  snprintf(ok, sizeof ok, ok_fmt, nr.name ? nr.name : "");
  return long_running ? long_call_print(ctx, &req, ok) : call_print(ctx, &req, ok);
}

static int cmd_status(ctl_ctx *ctx) {
  return name_verb(ctx, DPM__REQUEST__COMMAND_STATUS, "%s", 0);
}
static int cmd_sync(ctl_ctx *ctx) {
  return name_verb(ctx, DPM__REQUEST__COMMAND_SYNC, "synced %s", 1);
}
static int cmd_eval(ctl_ctx *ctx) {
  return name_verb(ctx, DPM__REQUEST__COMMAND_EVAL, "%s evaluated", 1);
}
static int cmd_pause(ctl_ctx *ctx) {
  return name_verb(ctx, DPM__REQUEST__COMMAND_PAUSE, "paused %s", 0);
}
/* resume NAME [--shards EP,..] [--allow-batch-change]: a fleet job's
 * coordinator re-forms it over the shards given (elastic); a note from the
 * daemon (the global batch changed) goes to stderr. */
static int cmd_resume(ctl_ctx *ctx) {
  Dpm__ResumeRequest rr = DPM__RESUME_REQUEST__INIT;
  rr.name = (char *)pos(ctx, 0);
  char **shards = NULL;
  size_t n_shards = 0;
  const char *sh = ctx->a->opt[O_SHARDS];
  if (sh && ctl_split(sh, &shards, &n_shards))
    return usage_error(ctx, "--shards takes a list such as tcp://10.0.0.1:7070,"
                            "tcp://10.0.0.2:7070");
  rr.shards = shards;
  rr.n_shards = n_shards;
  rr.has_allow_batch_change = ctx->a->opt[O_ALLOW_BATCH_CHANGE] != NULL;
  rr.allow_batch_change = rr.has_allow_batch_change;
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_RESUME;
  req.resume = &rr;
  char ok[512];
  snprintf(ok, sizeof ok, "resumed %s", rr.name ? rr.name : "");
  /* re-forming waits for the whole job to meet and load */
  Dpm__Response *resp;
  int rc = n_shards ? ctl_long_call(ctx, &req, &resp) : ctl_call(ctx, &req, &resp);
  ctl_free_list(shards, n_shards);
  if (rc) return rc;
  rc = ctl_print_response(ctx, resp, ok);
  /* what the daemon says besides (an elastic resume that changed the
   * global batch), on stderr: stdout keeps one JSON object */
  if (resp->message && *resp->message) fprintf(stderr, "dpmctl: %s\n", resp->message);
  dpm_client_free_response(resp);
  return rc;
}
static int cmd_delete(ctl_ctx *ctx) {
  return name_verb(ctx, DPM__REQUEST__COMMAND_DELETE, "deleted %s", 0);
}

static int cmd_list(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_LIST;
  req.list = &empty_msg;
  return call_print(ctx, &req, "no models");
}

static int cmd_metrics(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_METRICS;
  req.metrics = &empty_msg;
  return call_print(ctx, &req, "");
}

static int cmd_shutdown(ctl_ctx *ctx) {
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_SHUTDOWN;
  req.shutdown = &empty_msg;
  return long_call_print(ctx, &req, "dpmd is shutting down");
}

static int cmd_checkpoint(ctl_ctx *ctx) {
  Dpm__CheckpointRequest cr = DPM__CHECKPOINT_REQUEST__INIT;
  cr.name = (char *)pos(ctx, 0);
  char *out = NULL;
  if (ctx->a->opt[O_OUT] && !(out = absolute(ctx->a->opt[O_OUT]))) return no_memory(ctx);
  cr.out = out;
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_CHECKPOINT;
  req.checkpoint = &cr;
  int rc = long_call_print(ctx, &req, "checkpoint");
  free(out);
  return rc;
}

static int cmd_load(ctl_ctx *ctx) {
  Dpm__LoadRequest lr = DPM__LOAD_REQUEST__INIT;
  lr.name = (char *)pos(ctx, 0);
  char *path = absolute(pos(ctx, 1));
  if (!path) return no_memory(ctx);
  lr.path = path;
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_LOAD;
  req.load = &lr;
  int rc = long_call_print(ctx, &req, NULL);
  free(path);
  return rc;
}

static int cmd_extract(ctl_ctx *ctx) {
  Dpm__ExtractRequest er = DPM__EXTRACT_REQUEST__INIT;
  er.name = (char *)pos(ctx, 0);
  int rc;
  char *out = absolute(ctx->a->opt[O_OUT]);
  if (!out) return no_memory(ctx);
  if (ctl_split(ctx->a->opt[O_INPUTS], &er.inputs, &er.n_inputs)) {
    rc = usage_error(ctx, "--inputs takes blob names separated by commas");
  } else if (ctl_split(ctx->a->opt[O_OUTPUTS], &er.outputs, &er.n_outputs)) {
    rc = usage_error(ctx, "--outputs takes blob names separated by commas");
  } else {
    er.out = out;
    er.format = (char *)ctx->a->opt[O_FORMAT]; /* NULL: the default, dpm */
    Dpm__Request req = DPM__REQUEST__INIT;
    req.command_case = DPM__REQUEST__COMMAND_EXTRACT_PREDICTOR;
    req.extract_predictor = &er;
    rc = long_call_print(ctx, &req, "predictor");
  }
  ctl_free_list(er.inputs, er.n_inputs);
  ctl_free_list(er.outputs, er.n_outputs);
  free(out);
  return rc;
}

static int cmd_get_blob(ctl_ctx *ctx) {
  Dpm__GetBlobRequest gb = DPM__GET_BLOB_REQUEST__INIT;
  gb.name = (char *)pos(ctx, 0);
  gb.blob = (char *)pos(ctx, 1);
  gb.device = (char *)ctx->a->opt[O_DEVICE];
  Dpm__Request req = DPM__REQUEST__INIT;
  req.command_case = DPM__REQUEST__COMMAND_GET_BLOB;
  req.get_blob = &gb;
  Dpm__Response *r;
  int rc = ctl_long_call(ctx, &req, &r);
  if (rc) return rc;
  if (r->result_case == DPM__RESPONSE__RESULT_BLOB) {
    rc = ctl_print_blob(ctx, r->blob, ctx->a->opt[O_OUT]);
  } else {
    ctl_error(ctx, "CORRUPT", "dpmd answered get-blob without a tensor");
    rc = CTL_FAILED;
  }
  dpm_client_free_response(r);
  return rc;
}

static int cmd_help(ctl_ctx *ctx) {
  const char *name = pos(ctx, 0);
  for (int i = 0; name && i < ctl_n_verbs; i++)
    if (!strcmp(ctl_verbs[i].name, name)) {
      ctl_usage(stdout, &ctl_verbs[i]);
      return CTL_OK;
    }
  if (name) {
    char msg[256];
    snprintf(msg, sizeof msg, "no such command '%s' ('dpmctl help' lists them)", name);
    return usage_error(ctx, msg);
  }
  ctl_usage(stdout, NULL);
  return CTL_OK;
}

/* ---- the table ---- */

/* Help for an option that means something particular for a verb. */
#define OPT_HELP(...) ((const char *const[O_N_OPTIONS]){__VA_ARGS__})

const ctl_verb ctl_verbs[] = {
    {"ping", "ping", 0, 0, 0, 0, cmd_ping, 1, 0,
     .summary = "check that the daemon answers, and how fast",
     .text = "Sends a ping and prints the daemon's answer and the round trip in "
             "milliseconds. Exit 3 when the daemon cannot be reached.",
     .example = "dpmctl --endpoint ipc:///tmp/dpmd.sock ping"},
    {"version", "version", 0, 0, 0, 0, cmd_version, 1, 0,
     .summary = "the daemon's version, protocol and devices",
     .text = "Asks the daemon for its version, its protocol and the devices it "
             "serves. `dpmctl --version` prints dpmctl's own, without a daemon.",
     .example = "dpmctl --json version"},
    {"submit",
     "submit SPEC.yaml [--name N] [--devices cpu:0,cpu:1] [--checkpoint-every N|Ns] "
     "[--shards EP,EP...]",
     1, 1, OPT(O_NAME) | OPT(O_DEVICES) | OPT(O_CHECKPOINT_EVERY) | OPT(O_SHARDS), 0,
     cmd_submit, 1, 1, .summary = "build a model from a spec, one replica per device",
     .text = "Reads the model spec SPEC.yaml here (every key is checked; errors name "
             "file:line:column; docs/SPEC.md lists the keys and ops), makes its data "
             "paths absolute and sends it. The daemon builds one replica per device, "
             "initialises the parameters once and broadcasts them; the model is then "
             "ready to train. With --shards the daemon given by --endpoint coordinates "
             "a job over all the daemons listed.",
     .example =
         "dpmctl submit examples/fmnist_mlp.yaml --name mlp --devices cpu:0,cpu:1"},
    {"train", "train NAME --iters N|--epochs N [--wait] [--no-progress]", 1, 1,
     OPT(O_ITERS) | OPT(O_EPOCHS) | OPT(O_WAIT) | OPT(O_NO_PROGRESS), 0, cmd_train, 1, 0,
     .summary = "run N more training steps (or epochs)",
     .text = "Starts N steps (--iters) or N epochs (--epochs: N times the model's steps "
             "per epoch) of model NAME from its current iteration. Without --wait "
             "it answers at once and the model trains in the background (see status, "
             "watch); with --wait it answers when the steps are done.",
     .example = "dpmctl train mlp --iters 4680 --wait"},
    {"status", "status [NAME]", 0, 1, 0, 0, cmd_status, 1, 0,
     .summary = "a model's state, iteration, loss and speed (all models without NAME)",
     .text = "Prints the state (building, ready, training, paused, failed, with the "
             "reason), the iteration, the last loss and accuracy and the images per "
             "second of model NAME, or of every model. --json adds where the model's "
             "start went (phases_ms).",
     .example = "dpmctl status mlp"},
    {"list", "list", 0, 0, 0, 0, cmd_list, 1, 0, .summary = "the models, one per line",
     .text = "Lists every model of the daemon with its state and iteration.",
     .example = "dpmctl list"},
    {"watch", "watch [NAME] [--count N] [--until-done]", 0, 1,
     OPT(O_COUNT) | OPT(O_UNTIL_DONE), 0, ctl_cmd_watch, 1, 0,
     .summary = "print a model's events as they come",
     .text = "Subscribes to the daemon's events (progress, state, done, error) of "
             "model NAME, or of every model, and prints one line per event (one JSON "
             "object with --json) until interrupted.",
     .example = "dpmctl watch mlp --until-done",
     .opt_help = OPT_HELP([O_COUNT] = "stop after N events")},
    {"checkpoint", "checkpoint NAME [--out FILE]", 1, 1, OPT(O_OUT), 0, cmd_checkpoint, 1,
     1, .summary = "save the model's parameters and optimizer state",
     .text = "Writes a checkpoint of model NAME (the master device's parameters, "
             "optimizer state, computed parameters and iteration, under stripped "
             "names) between two steps, without stopping training. Without --out it "
             "goes into the state dir, where the daemon keeps the last few.",
     .example = "dpmctl checkpoint mlp --out /var/lib/dpmd/export/mlp.dpmckpt",
     .opt_help = OPT_HELP([O_OUT] = "write the checkpoint to FILE instead (under the "
                                    "state dir or the config's allowed_paths)")},
    {"load", "load NAME FILE", 2, 2, 0, 0, cmd_load, 1, 1,
     .summary = "load a checkpoint, then sync every device and shard",
     .text = "Loads checkpoint FILE into the master device of model NAME and syncs "
             "it to every device and shard (Caffe2's FinalizeAfterCheckpoint). A file "
             "of another model, or a bad one, is refused and the model stays as it "
             "was.",
     .example = "dpmctl load mlp /var/lib/dpmd/export/mlp.dpmckpt"},
    {"sync", "sync NAME", 1, 1, 0, 0, cmd_sync, 1, 1,
     .summary = "copy the master device's parameters to every device",
     .text = "Broadcasts the parameters and computed parameters of model NAME from the "
             "master device to every device and shard, as load does after loading.",
     .example = "dpmctl sync mlp"},
    {"extract-predictor",
     "extract-predictor NAME --inputs A[,B] --outputs X[,Y] --out DIR [--format "
     "dpm|onnx]",
     1, 1, OPT(O_INPUTS) | OPT(O_OUTPUTS) | OPT(O_OUT) | OPT(O_FORMAT),
     OPT(O_INPUTS) | OPT(O_OUTPUTS) | OPT(O_OUT), cmd_extract, 1, 1,
     .summary = "write the forward ops from inputs to outputs as a predictor",
     .text = "Writes the forward ops of model NAME that lead from the inputs to the "
             "outputs, in test mode, with stripped names and the parameters they "
             "read, into DIR (Caffe2's ExtractPredictorNet). Run it with dpmctl "
             "predict or libdpmpredict (dpm format), or onnxruntime (onnx).",
     .example = "dpmctl extract-predictor mlp --inputs data --outputs softmax --out "
                "/var/lib/dpmd/export/mlp",
     .opt_help = OPT_HELP([O_OUT] = "the directory to write (under the state dir or "
                                    "the config's allowed_paths)")},
    {"eval", "eval NAME", 1, 1, 0, 0, cmd_eval, 1, 1,
     .summary = "loss and accuracy on the spec's eval data",
     .text = "Runs the test net of model NAME over the whole eval data set of its spec "
             "(the eval section) and prints the mean loss and the accuracy.",
     .example = "dpmctl eval mlp"},
    {"predict",
     "predict DIR --input FILE [--labels FILE] [--count N] [--device D] [--out FILE]", 1,
     1, OPT(O_INPUT) | OPT(O_LABELS) | OPT(O_COUNT) | OPT(O_DEVICE) | OPT(O_OUT),
     OPT(O_INPUT), ctl_cmd_predict, 0, 0,
     .summary = "run an extracted predictor on images (no daemon)",
     .text = "Loads the dpm predictor in DIR (DIR/predictor.pb, written by "
             "extract-predictor) and runs it on the first images of an IDX file, raw "
             "pixels times the predictor's input scale, in batches of up to 256; "
             "prints each image's top-1 class and its probability. Needs no daemon. "
             "An ONNX export (DIR/model.onnx) is for onnxruntime.",
     .example = "dpmctl predict /var/lib/dpmd/export/mlp --count 10 --input "
                "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz",
     .opt_help =
         OPT_HELP([O_COUNT] = "how many images, from the first (default 10; 0: all)",
                  [O_DEVICE] = "cpu (default) or cuda:N",
                  [O_OUT] =
                      "also write output 0 of every image to FILE: raw little-endian "
                      "float32, one row per image")},
    {"get-blob", "get-blob NAME BLOB [--device cpu:1] [--out FILE]", 2, 2,
     OPT(O_DEVICE) | OPT(O_OUT), 0, cmd_get_blob, 1, 1,
     .summary = "read a blob (parameter, activation) of a replica",
     .text = "Prints the dims and first values of blob BLOB of model NAME on the "
             "master device, or another (--device, or a scoped name cpu_1/fc1_w); "
             "--json adds an FNV-1a hash of its bytes.",
     .example = "dpmctl get-blob mlp fc1_w --device cpu:1 --out fc1_w.bin",
     .opt_help = OPT_HELP([O_DEVICE] = "the replica's device (default: the master, the "
                                       "first)",
                          [O_OUT] = "also write the raw little-endian bytes to FILE "
                                    "(here, not on the daemon's side)")},
    {"pause", "pause NAME", 1, 1, 0, 0, cmd_pause, 1, 0,
     .summary = "stop training after the step in flight",
     .text = "Pauses model NAME at the next step boundary; resume goes on.",
     .example = "dpmctl pause mlp"},
    {"resume", "resume NAME [--shards EP,..] [--allow-batch-change]", 1, 1,
     OPT(O_SHARDS) | OPT(O_ALLOW_BATCH_CHANGE), 0, cmd_resume, 1, 0,
     .summary = "continue a paused model, or re-form a fleet job",
     .text = "Continues the remaining steps of paused model NAME. On a fleet job's "
             "coordinator, --shards re-forms the job over the daemons given, from its "
             "last checkpoint (elastic).",
     .example = "dpmctl resume mlp",
     .opt_help = OPT_HELP([O_SHARDS] = "re-form the job over these daemons "
                                       "(tcp://HOST:PORT each), this one first")},
    {"delete", "delete NAME", 1, 1, 0, 0, cmd_delete, 1, 0,
     .summary = "remove a model and its state",
     .text = "Stops model NAME, frees its devices and removes its directory from the "
             "state dir, checkpoints included.",
     .example = "dpmctl delete mlp"},
    {"metrics", "metrics", 0, 0, 0, 0, cmd_metrics, 1, 0,
     .summary = "the daemon's metrics in Prometheus text",
     .text = "Prints uptime, models by state, requests by command and status, the "
             "rendezvous store, the data cache and, per model, iteration, loss, "
             "images/s, step time and memory, in Prometheus' text format.",
     .example = "dpmctl metrics"},
    {"shutdown", "shutdown", 0, 0, 0, 0, cmd_shutdown, 1, 1,
     .summary = "stop the daemon (checkpointing models with progress)",
     .text = "Asks the daemon to finish the steps in flight, checkpoint every model "
             "with progress since its last checkpoint (training, ready or paused) and "
             "exit, as SIGTERM does; it exits non-zero naming a model it could not "
             "save.",
     .example = "dpmctl shutdown"},
    {"help", "help [COMMAND]", 0, 1, 0, 0, cmd_help, 0, 0,
     .summary = "the commands, or one command in full",
     .text = "Without COMMAND, lists the commands. With it, prints what the command "
             "does, each of its options and an example; `dpmctl COMMAND --help` does "
             "the same.",
     .example = "dpmctl help submit"},
};
const int ctl_n_verbs = (int)(sizeof ctl_verbs / sizeof *ctl_verbs);
