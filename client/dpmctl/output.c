/* dpmctl's output: results and errors as short human lines, or with --json
 * as exactly one JSON object on stdout (watch: one object per event line).
 * Only fields the daemon set are printed; non-finite numbers are null. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dpmctl/dpmctl.h"

void ctl_usage_short(FILE *f, const ctl_verb *v) {
  if (v)
    fprintf(f, "usage: dpmctl " CTL_GLOBAL_USAGE " %s\n", v->cmd->usage);
  else
    fprintf(f, "usage: dpmctl " CTL_GLOBAL_USAGE
               " COMMAND ...  ('dpmctl help' lists them)\n");
}

void ctl_error(const ctl_ctx *ctx, const char *status, const char *fmt, ...) {
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  if (!strcmp(status, "USAGE"))
    fprintf(stderr, "dpmctl: %s\n", msg);
  else
    fprintf(stderr, "dpmctl: %s: %s\n", status, msg);
  if (ctx && ctx->json) {
    dpm_json j;
    dpm_json_init(&j);
    dpm_json_object(&j, NULL);
    dpm_json_str(&j, "error", msg);
    dpm_json_str(&j, "status", status);
    dpm_json_end(&j);
    ctl_emit(&j);
    dpm_json_fini(&j);
  }
}

int ctl_emit(dpm_json *j) {
  const char *t = dpm_json_text(j);
  if (!t) {
    fprintf(stderr, "dpmctl: NOMEM: out of memory writing JSON\n");
    return CTL_FAILED;
  }
  fputs(t, stdout);
  fputc('\n', stdout);
  return CTL_OK;
}

static void json_strings(dpm_json *j, const char *key, char **v, size_t n) {
  dpm_json_array(j, key);
  for (size_t i = 0; i < n; i++) dpm_json_str(j, NULL, v[i]);
  dpm_json_end(j);
}

void ctl_json_model(dpm_json *j, const char *key, const Dpm__ModelInfo *m) {
  dpm_json_object(j, key);
  dpm_json_str(j, "name", m->name);
  dpm_json_str(j, "state", m->state);
  /* the scheduler's view before any object, so that a line of the object
   * split at '{' has them beside the name (bench/sched.sh) */
  if (m->waiting) dpm_json_str(j, "waiting", m->waiting);
  if (m->has_queue_position) dpm_json_uint(j, "queue_position", m->queue_position);
  if (m->has_share) dpm_json_num(j, "share", m->share);
  if (m->group) dpm_json_str(j, "group", m->group);
  if (m->has_iter) dpm_json_uint(j, "iter", m->iter);
  if (m->has_target_iter) dpm_json_uint(j, "target_iter", m->target_iter);
  if (m->n_devices) json_strings(j, "devices", m->devices, m->n_devices);
  if (m->has_loss) dpm_json_num(j, "loss", m->loss);
  if (m->has_accuracy) dpm_json_num(j, "accuracy", m->accuracy);
  if (m->has_lr) dpm_json_num(j, "lr", m->lr);
  if (m->has_images_per_s) dpm_json_num(j, "images_per_s", m->images_per_s);
  if (m->has_step_ms) dpm_json_num(j, "step_ms", m->step_ms);
  if (m->has_grad_norm) dpm_json_num(j, "grad_norm", m->grad_norm);
  if (m->has_loss_scale) dpm_json_num(j, "loss_scale", m->loss_scale);
  if (m->has_skipped_steps) dpm_json_uint(j, "skipped_steps", m->skipped_steps);
  if (m->has_skipped_samples) dpm_json_uint(j, "skipped_samples", m->skipped_samples);
  if (m->error) dpm_json_str(j, "error", m->error);
  if (m->checkpoint) dpm_json_str(j, "checkpoint", m->checkpoint);
  if (m->has_checkpoint_iter) dpm_json_uint(j, "checkpoint_iter", m->checkpoint_iter);
  if (m->checkpoint_error) dpm_json_str(j, "checkpoint_error", m->checkpoint_error);
  if (m->checkpoint_every) {
    const Dpm__CheckpointPolicy *p = m->checkpoint_every;
    dpm_json_object(j, "checkpoint_every");
    if (p->has_every_iters) dpm_json_uint(j, "iters", p->every_iters);
    if (p->has_every_seconds) dpm_json_num(j, "seconds", p->every_seconds);
    dpm_json_end(j);
  }
  if (m->has_memory_bytes) dpm_json_uint(j, "memory_bytes", m->memory_bytes);
  if (m->has_tensor_bytes) dpm_json_uint(j, "tensor_bytes", m->tensor_bytes);
  if (m->has_tensor_bytes_unshared)
    dpm_json_uint(j, "tensor_bytes_unshared", m->tensor_bytes_unshared);
  if (m->n_phases) { /* where submit -> first step went, in order (ms) */
    dpm_json_object(j, "phases_ms");
    for (size_t i = 0; i < m->n_phases; i++)
      dpm_json_num(j, m->phases[i]->name, m->phases[i]->ms);
    dpm_json_end(j);
  }
  if (m->has_shard_id) dpm_json_uint(j, "shard_id", m->shard_id);
  if (m->has_num_shards) dpm_json_uint(j, "num_shards", m->num_shards);
  if (m->coordinator) dpm_json_str(j, "coordinator", m->coordinator);
  if (m->n_shards) {
    dpm_json_array(j, "shards");
    for (size_t i = 0; i < m->n_shards; i++) {
      const Dpm__ShardInfo *s = m->shards[i];
      dpm_json_object(j, NULL);
      dpm_json_uint(j, "shard_id", s->shard_id);
      dpm_json_str(j, "endpoint", s->endpoint);
      if (s->state) dpm_json_str(j, "state", s->state);
      if (s->has_iter) dpm_json_uint(j, "iter", s->iter);
      if (s->has_target_iter) dpm_json_uint(j, "target_iter", s->target_iter);
      if (s->error) dpm_json_str(j, "error", s->error);
      dpm_json_end(j);
    }
    dpm_json_end(j);
  }
  if (m->schedule) { /* "schedule":{"priority":10,"weight":1,"preempt":"spill"} */
    const Dpm__Schedule *s = m->schedule;
    const char *preempt = ctl_preempt_word(s->preempt);
    dpm_json_object(j, "schedule");
    if (s->has_priority) dpm_json_int(j, "priority", s->priority);
    if (s->has_weight) dpm_json_num(j, "weight", s->weight);
    if (s->has_preempt && preempt) dpm_json_str(j, "preempt", preempt);
    if (s->has_preempt && !preempt) dpm_json_int(j, "preempt", s->preempt); /* newer */
    if (s->has_max_memory) dpm_json_uint(j, "max_memory", s->max_memory);
    dpm_json_end(j);
  }
  dpm_json_end(j);
}

void ctl_format_bytes(uint64_t bytes, char *buf, size_t cap) {
  static const char *const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) {
    snprintf(buf, cap, "%" PRIu64 " B", bytes);
    return;
  }
  double v = (double)bytes / 1024;
  size_t u = 0;
  while (v >= 1024 && u + 1 < sizeof units / sizeof *units) {
    v /= 1024;
    u++;
  }
  /* three significant digits, rounded as printed: 999.5 KiB is 1000 KiB */
  snprintf(buf, cap, "%.*f %s", v < 9.995 ? 2 : v < 99.95 ? 1 : 0, v, units[u]);
}

/* The state, with its place in the memory queue ("queued #2") and why it
 * waits in parentheses, less a first word that repeats the state:
 * "preempted (by big)", "queued #1 (3 GiB do not fit beside big)". */
static void state_text(const Dpm__ModelInfo *m, char *buf, size_t cap) {
  const char *state = m->state ? m->state : "?";
  int n = snprintf(buf, cap, "%s", state);
  if (m->has_queue_position && m->queue_position > 0 && n >= 0 && (size_t)n < cap)
    n += snprintf(buf + n, cap - (size_t)n, " #%u", m->queue_position);
  const char *why = m->waiting;
  if (!why || !*why || n < 0 || (size_t)n >= cap) return;
  size_t sl = strlen(state);
  if (!strncmp(why, state, sl) && (why[sl] == ' ' || why[sl] == ':')) {
    why += sl;
    why += strspn(why, ": ");
  }
  if (*why) snprintf(buf + n, cap - (size_t)n, " (%s)", why);
}

/* "  iter 120/500  loss 0.4123  acc 0.875  1234 img/s" */
static void stats(FILE *f, const Dpm__ModelInfo *m) {
  if (m->has_iter) {
    fprintf(f, "  iter %" PRIu64, m->iter);
    if (m->has_target_iter) fprintf(f, "/%" PRIu64, m->target_iter);
  }
  if (m->has_loss) fprintf(f, "  loss %.4f", m->loss);
  if (m->has_accuracy) fprintf(f, "  acc %.3f", m->accuracy);
  if (m->has_images_per_s) fprintf(f, "  %.0f img/s", m->images_per_s);
}

/* A fleet job: "  shards 2" at the coordinator (with how many are not in
 * its state), "  shard 1 of 2" elsewhere. */
static void shards_brief(FILE *f, const Dpm__ModelInfo *m) {
  if (m->n_shards) {
    size_t off = 0;
    for (size_t i = 0; i < m->n_shards; i++)
      off += !m->shards[i]->state || !m->state || strcmp(m->shards[i]->state, m->state);
    fprintf(f, "  shards %zu", m->n_shards);
    if (off) fprintf(f, " (%zu not %s)", off, m->state ? m->state : "?");
  } else if (m->has_num_shards && m->num_shards > 1) {
    fprintf(f, "  shard %u of %u", m->shard_id, m->num_shards);
  }
}

void ctl_model_line(FILE *f, const Dpm__ModelInfo *m) {
  char state[512];
  state_text(m, state, sizeof state);
  fprintf(f, "%s  %s", m->name ? m->name : "?", state);
  stats(f, m);
  shards_brief(f, m);
  if (m->error && *m->error) fprintf(f, "  error: %s", m->error);
  fputc('\n', f);
}

/* A table of models: a header line over columns as wide as their widest
 * cell (over every row), "-" where the daemon said nothing, no trailing
 * blanks. The table's columns and how a model fills them: */
#define CELL 256
#define MAX_COLS 12
typedef struct table_spec {
  int n_cols; /* at most MAX_COLS */
  const char *const *names;
  void (*cells)(const Dpm__ModelInfo *m, char cells[][CELL]);
} table_spec;

/* One line of the table, the header for cells NULL, after indent. */
static void table_row(FILE *f, const table_spec *t, const int *width, char (*cells)[CELL],
                      const char *indent) {
  char line[MAX_COLS * (CELL + 2) + 1];
  size_t len = 0;
  line[0] = 0;
  for (int c = 0; c < t->n_cols; c++) {
    int k = snprintf(line + len, sizeof line - len, "%-*s  ", width[c],
                     cells ? cells[c] : t->names[c]);
    if (k > 0) len += (size_t)k < sizeof line - len ? (size_t)k : sizeof line - len - 1;
  }
  while (len && line[len - 1] == ' ') len--;
  fprintf(f, "%s%.*s\n", indent, (int)len, line);
}

/* The header, then a row per model. With group: the models come grouped
 * (each group's consecutive), and each group is a line with its name, then
 * the header and its rows indented by two. */
static void table(FILE *f, const table_spec *t, Dpm__ModelInfo **models, size_t n,
                  const char *(*group)(const Dpm__ModelInfo *m, char *buf, size_t cap)) {
  int width[MAX_COLS];
  char cells[MAX_COLS][CELL];
  for (int c = 0; c < t->n_cols; c++) width[c] = (int)strlen(t->names[c]);
  for (size_t i = 0; i < n; i++) {
    t->cells(models[i], cells);
    for (int c = 0; c < t->n_cols; c++)
      if ((int)strlen(cells[c]) > width[c]) width[c] = (int)strlen(cells[c]);
  }
  if (!group) table_row(f, t, width, NULL, "");
  char buf[CELL], prev_buf[CELL];
  for (size_t i = 0; i < n; i++) {
    const char *g = group ? group(models[i], buf, sizeof buf) : NULL;
    if (g && (!i || strcmp(g, group(models[i - 1], prev_buf, sizeof prev_buf)))) {
      fprintf(f, "%s\n", g);
      table_row(f, t, width, NULL, "  ");
    }
    t->cells(models[i], cells);
    table_row(f, t, width, cells, group ? "  " : "");
  }
}

/* cell = "%llu/%llu" iter/target, "-" without an iteration */
static void iter_cell(const Dpm__ModelInfo *m, char *cell) {
  if (!m->has_iter)
    snprintf(cell, CELL, "-");
  else if (m->has_target_iter)
    snprintf(cell, CELL, "%" PRIu64 "/%" PRIu64, m->iter, m->target_iter);
  else
    snprintf(cell, CELL, "%" PRIu64, m->iter);
}

/* NOTE: why the model waits, a fleet job's shards and the error of a failed
 * model. */
static void note_cell(const Dpm__ModelInfo *m, char *cell) {
  char note[CELL] = "";
  FILE *f = fmemopen(note, sizeof note - 1, "w");
  if (f) {
    if (m->waiting && *m->waiting) fprintf(f, "  %s", m->waiting);
    shards_brief(f, m);
    if (m->error && *m->error) fprintf(f, "  error: %s", m->error);
    fclose(f);
  }
  const char *n = note;
  while (*n == ' ') n++;
  snprintf(cell, CELL, "%s", n);
}

/* list:
 *   NAME  STATE  ITER     LOSS    ACC    IMG/S  NOTE
 *   mlp   ready  468/468  0.4557  0.828  9747   */
enum { COL_NAME, COL_STATE, COL_ITER, COL_LOSS, COL_ACC, COL_IPS, COL_NOTE, N_COLS };
static const char *const col_names[N_COLS] = {"NAME", "STATE", "ITER", "LOSS",
                                              "ACC",  "IMG/S", "NOTE"};

static void model_cells(const Dpm__ModelInfo *m, char cells[][CELL]) {
  snprintf(cells[COL_NAME], CELL, "%s", m->name ? m->name : "?");
  snprintf(cells[COL_STATE], CELL, "%s", m->state ? m->state : "?");
  iter_cell(m, cells[COL_ITER]);
  snprintf(cells[COL_LOSS], CELL, m->has_loss ? "%.4f" : "-", m->loss);
  snprintf(cells[COL_ACC], CELL, m->has_accuracy ? "%.3f" : "-", m->accuracy);
  snprintf(cells[COL_IPS], CELL, m->has_images_per_s ? "%.0f" : "-", m->images_per_s);
  note_cell(m, cells[COL_NOTE]);
}

static const table_spec list_spec = {N_COLS, col_names, model_cells};

/* queue, per device group:
 *   cpu:0,cpu:1
 *     NAME   STATE      PRIORITY  WEIGHT  SHARE  MEMORY    ITER    NOTE
 *     big    training   10        1       93%    1.21 GiB  40/100
 *     small  preempted  0         1       7%     300 MiB   12/100  preempted by big */
enum { Q_NAME, Q_STATE, Q_PRIO, Q_WEIGHT, Q_SHARE, Q_MEM, Q_ITER, Q_NOTE, N_QCOLS };
static const char *const queue_col_names[N_QCOLS] = {
    "NAME", "STATE", "PRIORITY", "WEIGHT", "SHARE", "MEMORY", "ITER", "NOTE"};

static void queue_cells(const Dpm__ModelInfo *m, char cells[][CELL]) {
  const Dpm__Schedule *s = m->schedule;
  snprintf(cells[Q_NAME], CELL, "%s", m->name ? m->name : "?");
  if (m->has_queue_position && m->queue_position > 0) /* "queued #2" */
    snprintf(cells[Q_STATE], CELL, "%s #%u", m->state ? m->state : "?",
             m->queue_position);
  else
    snprintf(cells[Q_STATE], CELL, "%s", m->state ? m->state : "?");
  snprintf(cells[Q_PRIO], CELL, s && s->has_priority ? "%d" : "-", s ? s->priority : 0);
  snprintf(cells[Q_WEIGHT], CELL, s && s->has_weight ? "%g" : "-", s ? s->weight : 0);
  snprintf(cells[Q_SHARE], CELL, m->has_share ? "%.0f%%" : "-", m->share * 100);
  if (m->has_memory_bytes)
    ctl_format_bytes(m->memory_bytes, cells[Q_MEM], CELL);
  else
    snprintf(cells[Q_MEM], CELL, "-");
  iter_cell(m, cells[Q_ITER]);
  note_cell(m, cells[Q_NOTE]);
}

static const table_spec queue_spec = {N_QCOLS, queue_col_names, queue_cells};

/* A model's device group: the daemon's name for it, else its devices. */
static const char *group_of(const Dpm__ModelInfo *m, char *buf, size_t cap) {
  if (m->group && *m->group) return m->group;
  size_t len = 0;
  buf[0] = 0;
  for (size_t i = 0; i < m->n_devices && len + 1 < cap; i++) {
    int k = snprintf(buf + len, cap - len, "%s%s", i ? "," : "", m->devices[i]);
    if (k > 0) len += (size_t)k < cap - len ? (size_t)k : cap - len - 1;
  }
  return len ? buf : "-";
}

void ctl_queue_table(FILE *f, Dpm__ModelInfo **models, size_t n) {
  if (!n)
    fputs("no models\n", f);
  else
    table(f, &queue_spec, models, n, group_of);
}

int ctl_print_queue(const ctl_ctx *ctx, const Dpm__Response *r) {
  if (r->result_case != DPM__RESPONSE__RESULT_MODELS) {
    ctl_error(ctx, "CORRUPT", "dpmd answered queue without a list of models");
    return CTL_FAILED;
  }
  if (!ctx->json) {
    ctl_queue_table(stdout, r->models->model, r->models->n_model);
    return CTL_OK;
  }
  return ctl_print_response(ctx, r, NULL); /* {"models":[...]}, as list */
}

static void join(FILE *f, char **v, size_t n) {
  for (size_t i = 0; i < n; i++) fprintf(f, "%s%s", i ? "," : "", v[i]);
}

/* "  priority 10  weight 1  preempt spill  max memory 4.00 GiB  share 42%":
 * what the daemon said of the model's schedule, and its share of its
 * devices' time; nothing when it said none of it. */
static void schedule_line(FILE *f, const Dpm__ModelInfo *m) {
  const Dpm__Schedule *s = m->schedule;
  const char *preempt = s && s->has_preempt ? ctl_preempt_word(s->preempt) : NULL;
  int any = 0;
  if (s && s->has_priority) any |= 0 < fprintf(f, "  priority %d", s->priority);
  if (s && s->has_weight) any |= 0 < fprintf(f, "  weight %g", s->weight);
  if (preempt) any |= 0 < fprintf(f, "  preempt %s", preempt);
  if (s && s->has_preempt && !preempt) /* a newer daemon's policy */
    any |= 0 < fprintf(f, "  preempt %d", (int)s->preempt);
  if (s && s->has_max_memory && s->max_memory) {
    char b[32];
    ctl_format_bytes(s->max_memory, b, sizeof b);
    any |= 0 < fprintf(f, "  max memory %s", b);
  }
  if (m->has_share && m->share > 0)
    any |= 0 < fprintf(f, "  share %.0f%%", m->share * 100);
  if (any) fputc('\n', f);
}

/* One model in detail: its line, then what else the daemon said. */
static void model_detail(FILE *f, const Dpm__ModelInfo *m) {
  ctl_model_line(f, m);
  if (m->n_devices) {
    fputs("  devices ", f);
    join(f, m->devices, m->n_devices);
    fputc('\n', f);
  }
  schedule_line(f, m);
  if (m->has_lr || m->has_step_ms) {
    fputc(' ', f);
    if (m->has_lr) fprintf(f, " lr %g", m->lr);
    if (m->has_step_ms) fprintf(f, " step %.2f ms", m->step_ms);
    fputc('\n', f);
  }
  if (m->checkpoint) {
    fprintf(f, "  checkpoint %s", m->checkpoint);
    if (m->has_checkpoint_iter) fprintf(f, " (iter %" PRIu64 ")", m->checkpoint_iter);
    fputc('\n', f);
  }
  const Dpm__CheckpointPolicy *p = m->checkpoint_every;
  if (p && (p->every_iters || p->every_seconds > 0)) {
    fputs("  checkpoint every", f);
    if (p->every_iters) fprintf(f, " %" PRIu64 " iters", p->every_iters);
    if (p->every_iters && p->every_seconds > 0) fputs(" or", f);
    if (p->every_seconds > 0) fprintf(f, " %g s", p->every_seconds);
    fputc('\n', f);
  }
  if (m->checkpoint_error && *m->checkpoint_error)
    fprintf(f, "  checkpoint error: %s\n", m->checkpoint_error);
  if (m->coordinator && !m->n_shards && m->has_shard_id && m->shard_id > 0)
    fprintf(f, "  coordinated by %s\n", m->coordinator);
  /* "  shard 1  tcp://..  ready  iter 20/20" */
  for (size_t i = 0; i < m->n_shards; i++) {
    const Dpm__ShardInfo *s = m->shards[i];
    fprintf(f, "  shard %u  %s  %s", s->shard_id, s->endpoint ? s->endpoint : "?",
            s->state ? s->state : "unknown");
    if (s->has_iter) {
      fprintf(f, "  iter %" PRIu64, s->iter);
      if (s->has_target_iter) fprintf(f, "/%" PRIu64, s->target_iter);
    }
    if (s->error && *s->error) fprintf(f, "  error: %s", s->error);
    fputc('\n', f);
  }
}

static void json_version(dpm_json *j, const Dpm__VersionInfo *v) {
  dpm_json_str(j, "version", v->version);
  dpm_json_uint(j, "protocol", v->protocol);
  json_strings(j, "devices", v->devices, v->n_devices);
  if (v->has_uptime_s) dpm_json_num(j, "uptime_s", v->uptime_s);
  if (v->has_instance && v->instance) { /* hex: exact in any JSON reader */
    char hex[17];
    snprintf(hex, sizeof hex, "%016" PRIx64, v->instance);
    dpm_json_str(j, "instance", hex);
  }
}

int ctl_print_version(const ctl_ctx *ctx) {
  if (!ctx->json) {
    printf("dpmctl %s (protocol %d)\n", DPM_VERSION, DPM_PROTOCOL_VERSION);
    return CTL_OK;
  }
  dpm_json j;
  dpm_json_init(&j);
  dpm_json_object(&j, NULL);
  dpm_json_str(&j, "program", "dpmctl");
  dpm_json_str(&j, "version", DPM_VERSION);
  dpm_json_int(&j, "protocol", DPM_PROTOCOL_VERSION);
  dpm_json_end(&j);
  int rc = ctl_emit(&j);
  dpm_json_fini(&j);
  return rc;
}

void ctl_format_duration(double s, char *buf, size_t cap) {
  if (!isfinite(s) || s < 0 || s > 1e9) {
    snprintf(buf, cap, "?:??");
    return;
  }
  long t = lround(s);
  if (t >= 3600)
    snprintf(buf, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
  else
    snprintf(buf, cap, "%ld:%02ld", t / 60, t % 60);
}

static void version_line(FILE *f, const Dpm__VersionInfo *v) {
  fprintf(f, "dpmd %s  protocol %u", v->version ? v->version : "?", v->protocol);
  if (v->n_devices) {
    fputs("  devices ", f);
    join(f, v->devices, v->n_devices);
  }
  if (v->has_uptime_s) {
    char d[32];
    ctl_format_duration(v->uptime_s, d, sizeof d);
    fprintf(f, "  up %s", d);
  }
  if (v->protocol != DPM_PROTOCOL_VERSION)
    fprintf(f, "  (dpmctl speaks protocol %d)", DPM_PROTOCOL_VERSION);
  fputc('\n', f);
}

int ctl_print_response(const ctl_ctx *ctx, const Dpm__Response *r, const char *ok_text) {
  dpm_json j;
  dpm_json_init(&j);
  FILE *f = stdout;
  if (r->result_case == DPM__RESPONSE__RESULT_MODEL) { /* the model is the object */
    int rc = CTL_OK;
    if (ctx->json) {
      ctl_json_model(&j, NULL, r->model);
      rc = ctl_emit(&j);
    } else {
      model_detail(f, r->model);
    }
    dpm_json_fini(&j);
    return rc;
  }
  if (r->result_case == DPM__RESPONSE__RESULT_BLOB)
    return ctl_print_blob(ctx, r->blob, NULL);
  dpm_json_object(&j, NULL);
  switch (r->result_case) {
  case DPM__RESPONSE__RESULT_VERSION:
    if (ctx->json)
      json_version(&j, r->version);
    else
      version_line(f, r->version);
    break;
  case DPM__RESPONSE__RESULT_MODELS:
    if (ctx->json) {
      dpm_json_array(&j, "models");
      for (size_t i = 0; i < r->models->n_model; i++)
        ctl_json_model(&j, NULL, r->models->model[i]);
      dpm_json_end(&j);
    } else {
      if (!r->models->n_model)
        fputs("no models\n", f);
      else
        table(f, &list_spec, r->models->model, r->models->n_model, NULL);
    }
    break;
  case DPM__RESPONSE__RESULT_EVAL:
    if (ctx->json) {
      dpm_json_num(&j, "loss", r->eval->loss);
      dpm_json_num(&j, "accuracy", r->eval->accuracy);
      if (r->eval->has_iter) dpm_json_uint(&j, "iter", r->eval->iter);
    } else {
      fprintf(f, "loss %.4f  accuracy %.4f", r->eval->loss, r->eval->accuracy);
      if (r->eval->has_iter) fprintf(f, "  (iter %" PRIu64 ")", r->eval->iter);
      fputc('\n', f);
    }
    break;
  case DPM__RESPONSE__RESULT_PATH:
    if (ctx->json) {
      dpm_json_str(&j, "path", r->path->path);
      if (r->path->has_iter) dpm_json_uint(&j, "iter", r->path->iter);
    } else {
      fprintf(f, "%s%s", ok_text ? ok_text : "", ok_text ? " " : "");
      fputs(r->path->path ? r->path->path : "?", f);
      if (r->path->has_iter) fprintf(f, "  (iter %" PRIu64 ")", r->path->iter);
      fputc('\n', f);
    }
    break;
  case DPM__RESPONSE__RESULT_METRICS:
    if (ctx->json) {
      dpm_json_str(&j, "metrics", r->metrics);
    } else if (r->metrics) {
      size_t n = strlen(r->metrics);
      fputs(r->metrics, f);
      if (n && r->metrics[n - 1] != '\n') fputc('\n', f);
    }
    break;
  case DPM__RESPONSE__RESULT_WATCH:
    if (ctx->json)
      dpm_json_str(&j, "events", r->watch->events);
    else
      fprintf(f, "events %s\n", r->watch->events ? r->watch->events : "");
    break;
  default:
    if (ctx->json)
      dpm_json_bool(&j, "ok", 1);
    else
      fprintf(f, "%s\n", ok_text ? ok_text : "ok");
    break;
  }
  int rc = CTL_OK;
  if (ctx->json) {
    dpm_json_end(&j);
    rc = ctl_emit(&j);
  }
  dpm_json_fini(&j);
  return rc;
}

int ctl_print_ping(const ctl_ctx *ctx, const Dpm__Response *r, double rtt_ms) {
  const Dpm__VersionInfo *v =
      r->result_case == DPM__RESPONSE__RESULT_VERSION ? r->version : NULL;
  if (!ctx->json) {
    printf("ok  %s  %.3f ms", ctx->endpoint, rtt_ms);
    if (v) {
      printf("  ");
      version_line(stdout, v);
    } else {
      putchar('\n');
    }
    return CTL_OK;
  }
  dpm_json j;
  dpm_json_init(&j);
  dpm_json_object(&j, NULL);
  dpm_json_bool(&j, "ok", 1);
  dpm_json_str(&j, "endpoint", ctx->endpoint);
  dpm_json_num(&j, "rtt_ms", rtt_ms);
  if (v) json_version(&j, v);
  dpm_json_end(&j);
  int rc = ctl_emit(&j);
  dpm_json_fini(&j);
  return rc;
}

uint64_t ctl_fnv1a64(const void *data, size_t n) {
  const unsigned char *p = data;
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

/* The dtypes a tensor on the wire may have (proto/dpm.proto's DType). */
static const struct {
  const char *name;
  size_t size;
} dtypes[] = {
    /* clang-format off */
    [DPM__DTYPE__DTYPE_F32] = {"f32", 4},
    [DPM__DTYPE__DTYPE_I32] = {"i32", 4},
    [DPM__DTYPE__DTYPE_I64] = {"i64", 8},
    [DPM__DTYPE__DTYPE_BF16] = {"bf16", 2},
    [DPM__DTYPE__DTYPE_F16] = {"f16", 2},
    /* clang-format on */
};

/* The element size of dtype t and its name; 0 for one this build does not
 * know (a newer daemon's). */
static size_t dtype_info(Dpm__DType t, const char **name) {
  if ((unsigned)t >= sizeof dtypes / sizeof *dtypes) return 0;
  *name = dtypes[t].name;
  return dtypes[t].size;
}

/* Whether dtype t holds floating-point values (printed with %g). */
static int dtype_is_float(Dpm__DType t) {
  return t == DPM__DTYPE__DTYPE_F32 || t == DPM__DTYPE__DTYPE_BF16 ||
         t == DPM__DTYPE__DTYPE_F16;
}

/* The value of IEEE binary16 bits h (exact in a double). */
static double f16_value(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double sign = h & 0x8000 ? -1 : 1;
  if (e == 0) return sign * ldexp(m, -24);
  if (e == 31) return m ? NAN : sign * INFINITY;
  return sign * ldexp(m + 1024, e - 25);
}

/* Element i of little-endian data of a known dtype. */
static double element(const uint8_t *d, Dpm__DType dtype, size_t i, int64_t *as_int) {
  uint64_t u = 0;
  size_t size = dtypes[dtype].size;
  for (size_t b = 0; b < size; b++) u |= (uint64_t)d[i * size + b] << (8 * b);
  if (dtype_is_float(dtype)) {
    /* bf16: the high half of an f32 */
    uint32_t w = dtype == DPM__DTYPE__DTYPE_BF16 ? (uint32_t)u << 16 : (uint32_t)u;
    float x;
    memcpy(&x, &w, sizeof x);
    *as_int = 0;
    return dtype == DPM__DTYPE__DTYPE_F16 ? f16_value((uint16_t)u) : x;
  }
  *as_int = dtype == DPM__DTYPE__DTYPE_I32 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
  return (double)*as_int;
}

int ctl_print_blob(const ctl_ctx *ctx, const Dpm__TensorProto *t, const char *out) {
  const uint8_t *data = t->has_data ? t->data.data : NULL;
  size_t bytes = t->has_data ? t->data.len : 0;
  const char *name;
  size_t esize = dtype_info(t->dtype, &name);
  int known = esize > 0;
  char dtype[16];
  if (known)
    snprintf(dtype, sizeof dtype, "%s", name);
  else
    snprintf(dtype, sizeof dtype, "dtype%u", (unsigned)t->dtype);
  uint64_t count = 1;
  for (size_t i = 0; i < t->n_dims; i++)
    count *= t->dims[i] > 0 ? (uint64_t)t->dims[i] : 0;
  size_t have = known ? bytes / esize : 0; /* elements present */
  if (have > count) have = (size_t)count;

  if (out) {
    FILE *f = fopen(out, "wb");
    int ok = f && (bytes == 0 || fwrite(data, 1, bytes, f) == bytes);
    if (f && fclose(f)) ok = 0;
    if (!ok) {
      ctl_error(ctx, "IO", "cannot write %s: %m", out);
      return CTL_FAILED;
    }
  }
  uint64_t hash = ctl_fnv1a64(data, bytes);
  char hex[17];
  snprintf(hex, sizeof hex, "%016" PRIx64, hash);
  if (ctx->json) {
    dpm_json j;
    dpm_json_init(&j);
    dpm_json_object(&j, NULL);
    dpm_json_str(&j, "name", t->name);
    dpm_json_str(&j, "dtype", dtype);
    dpm_json_array(&j, "dims");
    for (size_t i = 0; i < t->n_dims; i++) dpm_json_int(&j, NULL, t->dims[i]);
    dpm_json_end(&j);
    dpm_json_uint(&j, "bytes", bytes);
    dpm_json_str(&j, "fnv1a64", hex);
    dpm_json_array(&j, "values");
    for (size_t i = 0; i < have && i < 16; i++) {
      int64_t iv;
      double v = element(data, t->dtype, i, &iv);
      if (dtype_is_float(t->dtype))
        dpm_json_float(&j, NULL, (float)v);
      else
        dpm_json_int(&j, NULL, iv);
    }
    dpm_json_end(&j);
    if (out) dpm_json_str(&j, "out", out);
    dpm_json_end(&j);
    int rc = ctl_emit(&j);
    dpm_json_fini(&j);
    return rc;
  }
  printf("%s %s[", t->name ? t->name : "?", dtype);
  for (size_t i = 0; i < t->n_dims; i++) printf("%s%" PRId64, i ? "," : "", t->dims[i]);
  printf("]  %" PRIu64 " values  %zu bytes  fnv1a64 %s\n", count, bytes, hex);
  if (known && have) {
    double lo = INFINITY, hi = -INFINITY, sum = 0;
    size_t nonfinite = 0;
    for (size_t i = 0; i < have; i++) {
      int64_t iv;
      double v = element(data, t->dtype, i, &iv);
      if (!isfinite(v)) {
        nonfinite++;
        continue;
      }
      lo = v < lo ? v : lo;
      hi = v > hi ? v : hi;
      sum += v;
    }
    if (have > nonfinite)
      printf("  min %g  max %g  mean %g", lo, hi, sum / (double)(have - nonfinite));
    if (nonfinite) printf("  %zu non-finite", nonfinite);
    printf("\n  values");
    for (size_t i = 0; i < have && i < 8; i++) {
      int64_t iv;
      double v = element(data, t->dtype, i, &iv);
      if (dtype_is_float(t->dtype))
        printf(" %g", v);
      else
        printf(" %" PRId64, iv);
    }
    printf("%s\n", have > 8 ? " ..." : "");
  }
  if (known && bytes != count * esize)
    printf("  warning: %zu data bytes, the dims say %" PRIu64 "\n", bytes, count * esize);
  if (out) printf("  wrote %zu bytes to %s\n", bytes, out);
  return CTL_OK;
}

const char *ctl_event_kind(int kind) {
  switch (kind) {
  case DPM__EVENT_KIND__EVENT_PROGRESS:
    return "progress";
  case DPM__EVENT_KIND__EVENT_STATE:
    return "state";
  case DPM__EVENT_KIND__EVENT_ERROR:
    return "error";
  case DPM__EVENT_KIND__EVENT_DONE:
    return "done";
  default:
    return "unknown";
  }
}

void ctl_print_event(const ctl_ctx *ctx, const Dpm__Event *ev) {
  const Dpm__ModelInfo *m = ev->model;
  if (ctx->json) {
    dpm_json j;
    dpm_json_init(&j);
    dpm_json_object(&j, NULL);
    dpm_json_str(&j, "model", m->name);
    dpm_json_str(&j, "kind", ctl_event_kind(ev->kind));
    dpm_json_str(&j, "state", m->state);
    if (m->has_iter) dpm_json_uint(&j, "iter", m->iter);
    if (m->has_target_iter) dpm_json_uint(&j, "target_iter", m->target_iter);
    if (m->has_loss) dpm_json_num(&j, "loss", m->loss);
    if (m->has_accuracy) dpm_json_num(&j, "accuracy", m->accuracy);
    if (m->has_images_per_s) dpm_json_num(&j, "images_per_s", m->images_per_s);
    if (m->has_grad_norm) dpm_json_num(&j, "grad_norm", m->grad_norm);
    if (m->has_loss_scale) dpm_json_num(&j, "loss_scale", m->loss_scale);
    if (m->has_skipped_steps) dpm_json_uint(&j, "skipped_steps", m->skipped_steps);
    if (m->has_skipped_samples) dpm_json_uint(&j, "skipped_samples", m->skipped_samples);
    if (ev->message)
      dpm_json_str(&j, "message", ev->message);
    else if (m->error && ev->kind == DPM__EVENT_KIND__EVENT_ERROR)
      dpm_json_str(&j, "message", m->error);
    if (ev->has_time) dpm_json_num(&j, "time", ev->time);
    dpm_json_end(&j);
    ctl_emit(&j);
    dpm_json_fini(&j);
  } else {
    if (ev->has_time && isfinite(ev->time)) {
      time_t t = (time_t)ev->time;
      struct tm tm;
      char hms[16];
      if (localtime_r(&t, &tm) && strftime(hms, sizeof hms, "%H:%M:%S", &tm))
        printf("%s ", hms);
    }
    printf("%s %s", m->name ? m->name : "?", ctl_event_kind(ev->kind));
    if (ev->kind == DPM__EVENT_KIND__EVENT_STATE)
      printf(" %s", m->state ? m->state : "?");
    stats(stdout, m);
    const char *msg = ev->message ? ev->message : ev->kind == 2 ? m->error : NULL;
    if (msg && *msg) printf(": %s", msg);
    putchar('\n');
  }
  fflush(stdout);
}
