/* dpm-train: train a spec in process, without a daemon.
 *
 *   dpm-train SPEC.yaml [--devices cpu:0,cpu:1] [--net-type simple|dag]
 *             [--epochs N | --iters N] [--eval-every N] [--json] [--verbose]
 *             [--resume FILE]
 *             [--checkpoint FILE] [--extract-predictor DIR --inputs A[,B]
 *             --outputs X[,Y] [--format dpm|onnx]]
 *             [--shard I/N (--job NAME | --prefix P) [--store URL]
 *              [--interface IF]]
 *
 * Evaluates on the spec's eval data after each epoch (after every Nth and
 * the last with --eval-every N; the others report no accuracy: null in
 * JSON, n/a in text). With --json it prints
 * one JSON object per line: per epoch {"epoch","steps","loss",
 * "test_accuracy","images_per_s","grad_norm"} (grad_norm: the epoch's last
 * update's global gradient norm, before clipping, where the update is
 * gathered: accumulate_steps > 1, clip_grad_norm or a loss scale; else
 * null), last a summary {"images_per_s",
 * "step_ms_median","input_wait_pct","test_accuracy","peak_rss_mb"} (and
 * "skipped_samples" for an image reader; input_wait_pct: the share of the
 * steps' time spent waiting for a batch). An epoch cut short by
 * --iters says so: "epoch 1 (10 of 468 steps)", and "steps" in JSON.
 * During an epoch, progress goes to stderr: a line redrawn on a terminal,
 * else a line every PROGRESS_EVERY_S seconds. --help and --version print
 * on stdout. Options take "--opt value" or "--opt=value"; --epochs and
 * --iters exclude each other (default: 1 epoch). The CUDA plugin's line
 * (what loaded, what the driver said) goes to stderr when the devices are
 * cuda:N, or with --verbose.
 *
 * One job over several processes: run one dpm-train per shard, each with
 * the same spec and flags but for --shard I/N. They meet at the store
 * (--store, default the spec's parallel.rendezvous.store when it is
 * file:// or redis://) under the prefix "dpm-train/NAME" (--job NAME) or P
 * (--prefix P): the same on every shard, and new for every run (a store's
 * keys cannot be set twice). Shard 0 alone reads --resume, writes
 * --checkpoint and --extract-predictor and prints figures (global
 * images/s; loss and accuracy of its own replicas); the others print
 * nothing on stdout, errors on stderr. Every shard evaluates after each
 * epoch (all hold the same parameters), so none waits out shard 0's
 * evaluation at its next collective. Collectives wait at most the spec's
 * parallel.rendezvous.timeout_ms (default 60 s).
 *
 * Exit codes: 0 ok, 1 failed, 2 usage. */
#include <cblas.h>
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "common/checked_spec.h"
#include "common/clock.h"
#include "common/device.h"
#include "common/err.h"
#include "common/flags.h"
#include "common/manpage.h"
#include "common/spec.h"
#include "common/validate.h"
#include "dpm/protocol.h"
#include "engine/count.h"
#include "train/trainer.h"

typedef struct {
  const char *spec, *devices, *net_type, *resume, *checkpoint, *predictor, *inputs,
      *outputs, *format, *shard, *store, *prefix, *job, *iface;
  long epochs, iters, eval_every;
  int json, verbose, dump_plan;
} options;

/* Command-line options: one table (common/flags.h). */
static const dpm_flag flags[] = {
    {"--devices", offsetof(options, devices), 's',
     "cpu:0,cpu:1,... (default: the spec's)"},
    {"--net-type", offsetof(options, net_type), 's',
     "simple | dag (default: the spec's)"},
    {"--epochs", offsetof(options, epochs), 'l', "epochs to train (default 1)"},
    {"--iters", offsetof(options, iters), 'l',
     "steps (updates: K batches each with update.accumulate_steps K) to train "
     "instead of epochs (not with --epochs)"},
    {"--eval-every", offsetof(options, eval_every), 'l',
     "evaluate after every Nth epoch and the last (default 1)"},
    {"--json", offsetof(options, json), 'b', "one JSON object per line"},
    {"--verbose", offsetof(options, verbose), 'b', "also the CUDA plugin's line"},
    {"--resume", offsetof(options, resume), 's', "load this checkpoint first"},
    {"--checkpoint", offsetof(options, checkpoint), 's', "write a checkpoint at the end"},
    {"--extract-predictor", offsetof(options, predictor), 's',
     "write a predictor to DIR"},
    {"--inputs", offsetof(options, inputs), 's', "predictor inputs, A[,B]"},
    {"--outputs", offsetof(options, outputs), 's', "predictor outputs, X[,Y]"},
    {"--format", offsetof(options, format), 's',
     "predictor format: dpm (DIR/predictor.pb, default) | onnx (DIR/model.onnx)"},
    {"--shard", offsetof(options, shard), 's',
     "I/N: this process is shard I of a job of N processes"},
    {"--job", offsetof(options, job), 's',
     "the job's name, the same on every shard and new for every run"},
    {"--prefix", offsetof(options, prefix), 's',
     "rendezvous prefix instead of dpm-train/JOB"},
    {"--store", offsetof(options, store), 's',
     "file:///DIR | redis://HOST:PORT (default: the spec's)"},
    {"--interface", offsetof(options, iface), 's',
     "network interface for the collectives (default: the spec's)"},
    {"--dump-plan", offsetof(options, dump_plan), 'b',
     "print one replica's step (forward with the precision rewrite's Casts, backward, "
     "collectives, update), each op with its blobs' types and shapes, the memory "
     "count, parameters and forward FLOPs, and exit"},
};
#define N_FLAGS (sizeof flags / sizeof *flags)

/* The usage on stdout for --help (exit 0), else on stderr after msg (2). */
static int usage(const char *msg) {
  FILE *f = msg ? stderr : stdout;
  if (msg) fprintf(stderr, "dpm-train: %s\n", msg);
  fprintf(f, "usage: dpm-train SPEC.yaml [options]\n");
  dpm_flags_usage(f, flags, N_FLAGS);
  return msg ? 2 : 0;
}

/* dpm-train.1 in roff (common/manpage.h), its options from the table. */
static int man(void) {
  FILE *f = stdout;
  dpm_man_begin(f, "dpm-train", "1", DPM_VERSION,
                "train a dpm model spec without a daemon");
  dpm_man_section(f, "SYNOPSIS");
  dpm_man_text(f, "dpm-train SPEC.yaml [options]");
  dpm_man_section(f, "DESCRIPTION");
  dpm_man_para(f, "Trains the model spec SPEC.yaml in this process, one replica per "
                  "device, and evaluates on the spec's eval data after each epoch. "
                  "Several processes (hosts) train one model with --shard I/N, meeting "
                  "at a rendezvous store. The spec's keys: docs/SPEC.md.");
  dpm_man_section(f, "OPTIONS");
  dpm_flags_man(f, flags, N_FLAGS);
  dpm_man_section(f, "EXAMPLE");
  dpm_man_example(f,
                  "dpm-train examples/fmnist_mlp.yaml --devices cpu:0,cpu:1 --epochs 2 "
                  "--json");
  dpm_man_section(f, "EXIT STATUS");
  dpm_man_para(f, "0 ok; 1 failed (the message names the spec file, line and op); 2 "
                  "usage.");
  dpm_man_section(f, "SEE ALSO");
  dpm_man_para(f, "dpmd(8), dpmctl(1)");
  return 0;
}

/* 0 to go on; else the exit code (usage printed, or --help, --version). */
static int parse(int argc, char **argv, options *o) {
  char msg[256];
  switch (dpm_flags_parse(argc, argv, flags, N_FLAGS, o, &o->spec, msg, sizeof msg)) {
  case DPM_FLAGS_HELP:
    return usage(NULL) - 1;
  case DPM_FLAGS_VERSION:
    printf("dpm-train %s\n", DPM_VERSION);
    return -1;
  case DPM_FLAGS_MAN:
    return man() - 1;
  case DPM_FLAGS_USAGE:
    return usage(msg);
  }
  if (!o->spec) return usage("no spec given");
  if (o->epochs && o->iters) return usage("give --epochs N or --iters N, not both");
  if (!o->iters && !o->epochs) o->epochs = 1;
  if (!o->eval_every) o->eval_every = 1;
  if (!o->predictor != !o->inputs || !o->predictor != !o->outputs)
    return usage("--extract-predictor needs --inputs and --outputs");
  if (o->format && !o->predictor) return usage("--format goes with --extract-predictor");
  if (!o->shard && (o->job || o->prefix || o->store || o->iface))
    return usage("--job, --prefix, --store and --interface go with --shard I/N");
  if (o->job && o->prefix) return usage("give --job NAME or --prefix P, not both");
  return 0;
}

/* "I/N": 0 <= I < N <= DPM_SPEC_MAX_SHARDS, decimal digits only. */
static int parse_shard(const char *s, int *id, int *n) {
  char *end;
  if (!s || s[0] < '0' || s[0] > '9') return -1;
  long i = strtol(s, &end, 10);
  if (*end != '/' || end[1] < '0' || end[1] > '9') return -1;
  long k = strtol(end + 1, &end, 10);
  if (*end || k < 1 || k > DPM_SPEC_MAX_SHARDS || i >= k) return -1;
  *id = (int)i, *n = (int)k;
  return 0;
}

/* A name made of [A-Za-z0-9._-] (and '/' where slash), 1..max bytes. */
static int name_ok(const char *s, size_t max, int slash) {
  size_t n = strlen(s);
  if (n < 1 || n > max) return 0;
  for (size_t i = 0; i < n; i++)
    if (!(isalnum((unsigned char)s[i]) || strchr("._-", s[i]) || (slash && s[i] == '/')))
      return 0;
  return 1;
}

/* The fleet options of --shard I/N: the store (the flag's, else the spec's
 * when this process can reach it), the prefix (P, or dpm-train/JOB), the
 * interface (the flag's, else the spec's) and the collectives' timeout
 * (the spec's rendezvous timeout). prefix_buf holds a derived prefix.
 * NULL when fine, else the usage message. */
static const char *fleet_options(const options *o, const Dpm__ModelSpec *spec,
                                 dpm_trainer_options *t, char *prefix_buf, size_t n) {
  const Dpm__Rendezvous *rv = spec->parallel ? spec->parallel->rendezvous : NULL;
  if (parse_shard(o->shard, &t->fleet.shard_id, &t->fleet.num_shards))
    return "--shard takes I/N: shard I (from 0) of N processes, N at most 256";
  if (rv) t->comm_timeout_ms = (int)rv->timeout_ms;
  if (t->fleet.num_shards == 1) return NULL; /* a job of this process alone */
  const char *store = o->store ? o->store : rv ? rv->store : NULL;
  if (!store)
    return "--shard I/N needs --store file:///DIR or redis://HOST:PORT (the spec has "
           "no parallel.rendezvous.store)";
  if (!strcmp(store, "daemon"))
    return o->store ? "--store daemon is dpmd's own store: give file:///DIR or "
                      "redis://HOST:PORT"
                    : "--shard I/N needs --store file:///DIR or redis://HOST:PORT (the "
                      "spec's parallel.rendezvous.store is 'daemon', which only dpmd "
                      "serves)";
  if (!dpm_store_url_valid(store))
    return "--store takes file:///DIR or redis://HOST:PORT";
  const char *iface = o->iface ? o->iface : rv ? rv->interface : NULL;
  if (iface && !dpm_interface_name_valid(iface))
    return "--interface takes a network interface name (eth0)";
  if (o->job) {
    if (!name_ok(o->job, 100, 0))
      return "--job takes a name of 1-100 letters, digits, '.', '_' or '-'";
    snprintf(prefix_buf, n, "dpm-train/%s", o->job);
  } else if (o->prefix) {
    if (!name_ok(o->prefix, 200, 1))
      return "--prefix takes 1-200 letters, digits, '.', '_', '-' or '/'";
    snprintf(prefix_buf, n, "%s", o->prefix);
  } else {
    return "--shard I/N needs --job NAME (the same on every shard, new for every run) "
           "or --prefix P";
  }
  t->fleet.rendezvous =
      (dpm_comm_rendezvous){.store = store, .prefix = prefix_buf, .iface = iface};
  return NULL;
}

/* "cpu:0,cpu:1" -> 2: canonical devices of one kind (common/device.h), each
 * once, together 0..n-1; the kind into *kind. */
static int parse_devices(const char *list, int *n, dpm_device_kind *kind) {
  char seen[DPM_MAX_DEVICE_INDEX + 1] = {0}, item[32];
  *n = 0;
  for (const char *p = list;; p++) {
    size_t len = strcspn(p, ",");
    dpm_device d;
    if (len >= sizeof item) return -1;
    memcpy(item, p, len);
    item[len] = 0;
    if (dpm_device_parse(item, &d) || d.kind == DPM_DEVICE_FENCED ||
        (*n && d.kind != *kind) || seen[d.index]++)
      return -1;
    *kind = d.kind;
    (*n)++;
    p += len;
    if (!*p) break;
  }
  for (int d = 0; d < *n; d++)
    if (!seen[d]) return -1;
  return 0;
}

/* Split "a,b" in place into names; returns the count (at most max). */
static int split(char *list, char **names, int max) {
  int n = 0;
  for (char *save, *tok = strtok_r(list, ",", &save); tok && n < max;
       tok = strtok_r(NULL, ",", &save))
    names[n++] = tok;
  return n;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double peak_rss_mb(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_maxrss / 1024.0;
}

/* v with prec decimals; null (JSON) or n/a (text) when not finite, e.g. the
 * test accuracy of a spec without eval data. */
static const char *num(char *buf, size_t n, double v, int prec, int json) {
  if (!isfinite(v)) return json ? "null" : "n/a";
  snprintf(buf, n, "%.*f", prec, v);
  return buf;
}

/* Whether the run asks for cuda devices: --devices, else the spec's. */
static int wants_gpus(const options *o, const dpm_trainer_options *topt,
                      const dpm_checked_spec *spec) {
  if (o->devices) return topt->kind == DPM_DEVICE_CUDA;
  size_t n;
  const dpm_device *devs = dpm_checked_spec_devices(spec, &n);
  return n && devs[0].kind == DPM_DEVICE_CUDA; /* one kind per model */
}

static const char *const net_types[] = {
    [DPM_NET_SIMPLE] = "simple", [DPM_NET_DAG] = "dag"};

/* Progress within an epoch, on stderr: on a terminal one line redrawn at
 * most every REDRAW_S, else a line every PROGRESS_EVERY_S. */
#define REDRAW_S 0.2
#define PROGRESS_EVERY_S 10.0
typedef struct {
  int tty;
  double next; /* when to show again (monotonic seconds) */
  int drawn;   /* a redrawn line is on the terminal */
} progress;

static void progress_show(progress *p, int64_t epoch, int64_t step, int64_t steps,
                          double loss) {
  double now = dpm_mono_s();
  if (now < p->next) return;
  p->next = now + (p->tty ? REDRAW_S : PROGRESS_EVERY_S);
  fprintf(stderr, "%sepoch %lld  step %lld/%lld  loss %.4f%s", p->tty ? "\r" : "",
          (long long)epoch, (long long)step, (long long)steps, loss, p->tty ? "" : "\n");
  fflush(stderr);
  p->drawn = p->tty;
}

/* Wipes a redrawn line before the epoch's own line. */
static void progress_end(progress *p) {
  if (p->drawn) fputs("\r\033[K", stderr);
  p->drawn = 0;
  p->next = dpm_mono_s() + (p->tty ? REDRAW_S : PROGRESS_EVERY_S);
}

/* Trains o->epochs epochs (or o->iters steps), printing per epoch unless
 * quiet (a shard other than 0); images are the job's, all shards'. An
 * epoch that --iters cuts short is labelled with its steps. */
static dpm_status train(dpm_trainer *t, const options *o, int shards, int quiet,
                        dpm_err *err) {
  int64_t per_epoch = dpm_trainer_steps_per_epoch(t);
  int64_t total = o->iters ? o->iters : o->epochs * per_epoch;
  int64_t epochs = o->iters ? (o->iters + per_epoch - 1) / per_epoch : o->epochs;
  double images = (double)dpm_trainer_batch(t) * dpm_trainer_devices(t) * shards *
                  dpm_trainer_accumulate_steps(t);
  double *ms = malloc((size_t)(total ? total : 1) * sizeof *ms), acc = NAN, train_ms = 0;
  double wait_ms = 0;
  uint64_t skipped = 0;
  int64_t done = 0;
  dpm_status s = ms ? DPM_OK : dpm_nomem(err);
  progress pr = {.tty = isatty(STDERR_FILENO)};
  pr.next = dpm_mono_s() + (pr.tty ? REDRAW_S : PROGRESS_EVERY_S);
  for (int64_t e = 0; e < epochs && !s; e++) {
    int64_t steps = total - done < per_epoch ? total - done : per_epoch;
    double loss_sum = 0, epoch_ms = 0, eval_loss, norm = NAN;
    for (int64_t i = 0; i < steps && !s; i++, done++) {
      dpm_step_stats st;
      if ((s = dpm_trainer_step(t, 1, &st, err))) break;
      ms[done] = st.step_ms;
      epoch_ms += st.step_ms;
      wait_ms += st.input_ms;
      skipped = st.samples_skipped;
      loss_sum += st.loss;
      norm = st.grad_norm;
      if (!quiet) progress_show(&pr, e + 1, i + 1, steps, loss_sum / (double)(i + 1));
    }
    if (!quiet) progress_end(&pr);
    if (s) break;
    acc = NAN;
    if (((e + 1) % o->eval_every == 0 || e + 1 == epochs) &&
        (s = dpm_trainer_eval(t, &eval_loss, &acc, err)) && s != DPM_STATE)
      break;
    s = DPM_OK;
    train_ms += epoch_ms;
    double ips = steps * images / (epoch_ms / 1e3);
    char a[32], l[32], g[32] = "null", part[64] = "";
    if (quiet) continue;
    if (isfinite(norm)) snprintf(g, sizeof g, "%.9g", norm);
    if (steps < per_epoch)
      snprintf(part, sizeof part, " (%lld of %lld steps)", (long long)steps,
               (long long)per_epoch);
    if (o->json)
      printf("{\"epoch\":%lld,\"steps\":%lld,\"loss\":%s,\"test_accuracy\":%s,"
             "\"images_per_s\":%.0f,\"grad_norm\":%s}\n",
             (long long)e + 1, (long long)steps, num(l, sizeof l, loss_sum / steps, 6, 1),
             num(a, sizeof a, acc, 4, 1), ips, g);
    else
      printf("epoch %lld%s  loss %s  test accuracy %s  %.0f images/s\n", (long long)e + 1,
             part, num(l, sizeof l, loss_sum / steps, 6, 0), num(a, sizeof a, acc, 4, 0),
             ips);
    fflush(stdout);
  }
  if (!s && !quiet) {
    qsort(ms, (size_t)done, sizeof *ms, cmp_double);
    char a[32], m[32], r[32], w[32], k[48] = "";
    if (dpm_trainer_image_reader(t))
      snprintf(k, sizeof k,
               o->json ? ",\"skipped_samples\":%llu" : ", %llu skipped samples",
               (unsigned long long)skipped);
    printf(o->json
               ? "{\"images_per_s\":%.0f,\"step_ms_median\":%s,\"input_wait_pct\":%s,"
                 "\"test_accuracy\":%s,\"peak_rss_mb\":%s%s}\n"
               : "done: %.0f images/s, median step %s ms, input wait %s%%, test accuracy "
                 "%s, peak RSS %s MB%s\n",
           done * images / (train_ms / 1e3),
           num(m, sizeof m, done ? ms[done / 2] : NAN, 4, o->json),
           num(w, sizeof w, train_ms > 0 ? 100 * wait_ms / train_ms : NAN, 2, o->json),
           num(a, sizeof a, acc, 4, o->json), num(r, sizeof r, peak_rss_mb(), 1, o->json),
           k);
  }
  free(ms);
  return s;
}

/* One blob of a dumped op: "name:bf16[64,256]" (shape unknown: the name). */
static void dump_blob(const dpm_shapes *t, const char *name, const char *sep) {
  const dpm_blobinfo *b = dpm_shapes_get(t, name);
  char s[96] = "";
  if (b) dpm_shape_str(&b->shape, s, sizeof s);
  printf("%s%s%s%s", sep, name, b ? ":" : "", s);
}

/* One op a line: "12 FC fc1 <- data_bf16:bf16[64,784] ...", from `first`. */
static void dump_net(const dpm_net *net, const dpm_shapes *t, const char *first) {
  for (int i = 0; i < net->n; i++) {
    const dpm_node *n = &net->nodes[i];
    printf("%s%d %s", first, i, n->def->name);
    for (int k = 0; k < n->n_out; k++)
      if (n->out[k]) dump_blob(t, n->out[k], k ? ", " : " ");
    printf(" <-");
    for (int k = 0; k < n->n_in; k++)
      if (n->in[k]) dump_blob(t, n->in[k], k ? ", " : " ");
    printf("\n");
  }
}

/* The step plan, one op a line, then the working copies' refresh (run
 * only after the masters change other than by the update), "r0 Cast ...". */
static void dump_plan(const dpm_trainer *t) {
  const dpm_plan *p = dpm_trainer_plan(t);
  const dpm_model *m = dpm_trainer_model(t);
  printf("# %s: precision.compute %s; %d ops, forward first %d\n", m->name,
         m->compute == DPM_F32 ? "fp32" : dpm_dtype_name(m->compute), p->step.n,
         p->n_forward);
  const dpm_trainer_memory *mem = dpm_trainer_memory_of(t);
  printf("# memory (every replica): tensors %.2f MB (%.2f MB without sharing), kernels' "
         "scratch %.2f MB\n",
         mem->tensors / 1e6, mem->tensors_unshared / 1e6, mem->scratch / 1e6);
  dpm_model_count c = dpm_model_count_of(m);
  printf("# parameters: %lld trainable (%.2f M), %lld computed (running statistics)\n",
         (long long)c.params, c.params / 1e6, (long long)c.computed);
  printf("# forward per example: %.4g GFLOPs = 2 x %.0f multiply-adds of %lld Conv and "
         "%lld FC (biases, norms, activations, pooling and the loss not counted)\n",
         2 * c.macs / 1e9, c.macs, (long long)c.n_conv, (long long)c.n_fc);
  dump_net(&p->step, &m->shapes, "");
  if (!m->refresh.n) return;
  printf("# working copies, written by the update; made anew by these after a load, "
         "a sync or a BMUF block:\n");
  dump_net(&m->refresh, &m->shapes, "r");
}

int main(int argc, char **argv) {
  options o = {0};
  int rc = parse(argc, argv, &o);
  if (rc) return rc < 0 ? 0 : rc;
  openblas_set_num_threads(1); /* each device worker calls BLAS on its own */
  /* a peer shard that dies mid-collective is an error of the collective
     (EPIPE), not a reason to die without a word */
  signal(SIGPIPE, SIG_IGN);
  dpm_trainer_options topt = {.net_type = -1};
  if (o.devices && parse_devices(o.devices, &topt.devices, &topt.kind))
    return usage("--devices takes cpu:0,cpu:1,... or cuda:0,cuda:1,... (one kind, each "
                 "once, from 0)");
  char loaded[640];
  /* the GPU plugin's line: once the devices are known */
  dpm_backend_load(DPM_DEVICE_CUDA, loaded, sizeof loaded);
  for (int k = 0; o.net_type && k < 2; k++)
    if (!strcmp(o.net_type, net_types[k])) topt.net_type = k;
  if (o.net_type && topt.net_type < 0) return usage("--net-type is simple or dag");
  dpm_checked_spec *spec = NULL;
  dpm_err err = {0};
  dpm_trainer *t = NULL;
  char prefix[256];
  dpm_status s = dpm_spec_load_checked(o.spec, &spec, &err);
  if (!s && o.shard) {
    const char *bad =
        fleet_options(&o, dpm_checked_spec_pb(spec), &topt, prefix, sizeof prefix);
    if (bad) {
      dpm_checked_spec_free(spec);
      return usage(bad);
    }
  }
  if (o.verbose || (!s && wants_gpus(&o, &topt, spec)))
    fprintf(stderr, "dpm-train: %s\n", loaded);
  int shards = topt.fleet.num_shards > 1 ? topt.fleet.num_shards : 1;
  int lead = topt.fleet.shard_id == 0; /* shard 0 reads, writes and prints */
  topt.plan_only = o.dump_plan;
  if (!s) s = dpm_trainer_create_checked(spec, &topt, &t, &err);
  if (!s && o.dump_plan) {
    dump_plan(t);
    dpm_trainer_destroy(t);
    dpm_checked_spec_free(spec);
    return 0;
  }
  /* in a job of several shards every shard loads together: shard 0 reads
     the file (or, without --resume, tells the others there is none) */
  if (!s && (o.resume || shards > 1))
    s = dpm_trainer_load(t, NULL, lead ? o.resume : NULL, &err);
  if (!s) s = train(t, &o, shards, !lead, &err);
  if (!s && lead && o.checkpoint) s = dpm_trainer_checkpoint(t, NULL, o.checkpoint, &err);
  if (!s && lead && o.predictor) {
    char in_list[1024], out_list[1024], *in[DPM_OP_MAX_IO], *out[DPM_OP_MAX_IO];
    snprintf(in_list, sizeof in_list, "%s", o.inputs);
    snprintf(out_list, sizeof out_list, "%s", o.outputs);
    int n_in = split(in_list, in, DPM_OP_MAX_IO),
        n_out = split(out_list, out, DPM_OP_MAX_IO);
    s = dpm_trainer_export_format(t, o.format, (const char *const *)in, n_in,
                                  (const char *const *)out, n_out, NULL, o.predictor,
                                  &err);
  }
  if (s) fprintf(stderr, "dpm-train: %s\n", err.msg);
  dpm_trainer_destroy(t);
  dpm_checked_spec_free(spec);
  return s ? 1 : 0;
}
