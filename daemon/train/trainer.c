/* The in-process trainer: reader -> train net -> update net, and eval. */
#include "train/trainer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/exec.h"
#include "engine/rng.h"
#include "io/idx.h"
#include "io/reader.h"

struct dpm_trainer {
  dpm_model model;
  dpm_reader *reader, *eval_reader;
  dpm_workspace ws;
  dpm_ctx ctx;
  dpm_exec train;
  dpm_blob *data, *label, *lr;
  dpm_blob **losses, *accuracy;
  uint64_t iter;
  int eval_batch;
  char *eval_images, *eval_labels;
  double scale;
};

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* One example's shape, from the IDX header (nothing loaded yet) or the
 * synthetic shape. */
static dpm_status input_shape(const Dpm__InputSpec *in, int64_t chw[3], dpm_err *err) {
  if (in->reader == DPM__READER_KIND__READER_IDX) {
    dpm_idx x;
    if (dpm_idx_peek(in->images, 3, &x, err)) return err->code;
    chw[0] = 1;
    chw[1] = x.dim[1];
    chw[2] = x.dim[2];
    return DPM_OK;
  }
  for (int i = 0; i < 3; i++) chw[i] = in->n_shape == 3 ? in->shape[i] : (i ? 28 : 1);
  return DPM_OK;
}

static dpm_reader_config reader_config(const Dpm__InputSpec *in, int batch) {
  return (dpm_reader_config){
      .kind = in->reader == DPM__READER_KIND__READER_IDX ? DPM_READER_IDX
                                                          : DPM_READER_SYNTHETIC,
      .images = in->images, .labels = in->labels, .scale = in->scale,
      .shuffle = in->shuffle, .seed = in->seed, .batch = batch,
      .shard_id = (int)in->shard_id, .num_shards = (int)in->num_shards,
      .prefetch = (int)in->prefetch, .repeat = 1,
      .num_examples = (int)in->num_examples,
      .channels = in->n_shape == 3 ? (int)in->shape[0] : 1,
      .height = in->n_shape == 3 ? (int)in->shape[1] : 28,
      .width = in->n_shape == 3 ? (int)in->shape[2] : 28,
      .num_classes = (int)in->num_classes,
  };
}

static dpm_status bind(dpm_trainer *t, dpm_err *err) {
  dpm_model *m = &t->model;
  dpm_exec init = {0};
  dpm_status s = dpm_exec_bind(&init, &m->init, &m->shapes, &t->ws, &t->ctx, err);
  if (!s) dpm_exec_run(&init);
  dpm_exec_fini(&init);
  if (!s) s = dpm_exec_bind(&t->train, &m->train, &m->shapes, &t->ws, &t->ctx, err);
  if (s) return s;
  t->data = dpm_ws_find(&t->ws, m->data);
  t->label = dpm_ws_find(&t->ws, m->label);
  t->lr = dpm_ws_find(&t->ws, "lr");
  t->accuracy = m->accuracy ? dpm_ws_find(&t->ws, m->accuracy) : NULL;
  if (!(t->losses = calloc((size_t)m->n_losses, sizeof *t->losses)))
    return dpm_errf(err, DPM_NOMEM, "out of memory");
  for (int i = 0; i < m->n_losses; i++) t->losses[i] = dpm_ws_find(&t->ws, m->losses[i]);
  return DPM_OK;
}

dpm_status dpm_trainer_create(const Dpm__ModelSpec *spec, dpm_trainer **out,
                              dpm_err *err) {
  *out = NULL;
  if (!spec->input) return dpm_errf(err, DPM_SPEC, "%s: no input section", spec->source);
  dpm_trainer *t = calloc(1, sizeof *t);
  if (!t) return dpm_errf(err, DPM_NOMEM, "out of memory");
  int batch = (int)spec->input->batch_size;
  int64_t chw[3];
  dpm_status s = input_shape(spec->input, chw, err);
  if (!s) s = dpm_model_build(spec, chw, batch, 1.0f, &t->model, err);
  if (!s) {
    dpm_reader_config rc = reader_config(spec->input, batch);
    s = dpm_reader_create(&rc, &t->reader, err);
  }
  if (!s && spec->eval && spec->eval->images) {
    t->eval_batch = (int)spec->eval->batch_size;
    t->scale = spec->input->scale;
    if (!(t->eval_images = strdup(spec->eval->images)) ||
        !(t->eval_labels = strdup(spec->eval->labels ? spec->eval->labels : "")))
      s = dpm_errf(err, DPM_NOMEM, "out of memory");
  }
  dpm_rng_seed(t->ctx.rng, spec->input->seed ^ 0x5eedull);
  if (!s) s = bind(t, err);
  if (s) {
    dpm_trainer_destroy(t);
    return s;
  }
  *out = t;
  return DPM_OK;
}

/* The data and label blobs become views of the reader's batch buffer (valid
 * until the next dpm_reader_next): no copy. */
static void load_batch(dpm_blob *data, dpm_blob *label, const dpm_batch *b) {
  dpm_tensor_view(&data->t, &data->t.shape, b->data);
  dpm_tensor_view(&label->t, &label->t.shape, b->label);
}

dpm_status dpm_trainer_step(dpm_trainer *t, int n, dpm_step_stats *last, dpm_err *err) {
  for (int i = 0; i < n; i++) {
    double t0 = now_ms();
    const dpm_batch *b;
    if (dpm_reader_next(t->reader, &b, err)) return err->code;
    load_batch(t->data, t->label, b);
    dpm_exec_run_range(&t->train, 0, t->model.n_forward);
    double loss = 0;
    for (int l = 0; l < t->model.n_losses; l++) loss += *dpm_f32(&t->losses[l]->t);
    if (!isfinite(loss))
      return dpm_errf(err, DPM_NUMERIC, "loss is %g at iteration %llu", loss,
                      (unsigned long long)t->iter);
    dpm_exec_run_range(&t->train, t->model.n_forward, t->train.n);
    t->iter++;
    if (last) {
      *last = (dpm_step_stats){
          .iter = t->iter, .loss = loss,
          .accuracy = t->accuracy ? *dpm_f32(&t->accuracy->t) : NAN,
          .lr = *dpm_f32(&t->lr->t), .step_ms = now_ms() - t0};
    }
  }
  return DPM_OK;
}

dpm_status dpm_trainer_eval(dpm_trainer *t, double *loss, double *accuracy,
                            dpm_err *err) {
  const dpm_model *m = &t->model;
  if (!t->eval_images) return dpm_errf(err, DPM_STATE, "%s: no eval data", m->source);
  if (!t->eval_reader) {
    dpm_reader_config rc = {.kind = DPM_READER_IDX, .images = t->eval_images,
                            .labels = t->eval_labels, .scale = t->scale, .batch = t->eval_batch,
                            .num_shards = 1, .prefetch = 2, .repeat = 0};
    if (dpm_reader_create(&rc, &t->eval_reader, err)) return err->code;
  } else if (dpm_reader_rewind(t->eval_reader)) {
    return dpm_errf(err, DPM_INTERNAL, "cannot rewind the eval reader");
  }
  dpm_workspace ws = {.parent = &t->ws};
  dpm_exec x = {0};
  double sum_loss = 0, sum_acc = 0;
  int64_t seen = 0;
  int shaped = -1;
  dpm_status s = DPM_OK;
  for (;;) {
    const dpm_batch *b;
    if ((s = dpm_reader_next(t->eval_reader, &b, err)) || !b) break;
    if (b->n != shaped) {
      dpm_shapes shapes = {0};
      s = dpm_model_test_shapes(m, b->n, &shapes, err);
      if (!s) s = dpm_exec_bind(&x, &m->test, &shapes, &ws, &t->ctx, err);
      dpm_shapes_fini(&shapes);
      if (s) break;
      shaped = b->n;
    }
    load_batch(dpm_ws_find(&ws, m->data), dpm_ws_find(&ws, m->label), b);
    dpm_exec_run(&x);
    for (int l = 0; l < m->n_losses; l++)
      sum_loss += *dpm_f32(&dpm_ws_find(&ws, m->losses[l])->t) * b->n;
    if (m->accuracy) sum_acc += *dpm_f32(&dpm_ws_find(&ws, m->accuracy)->t) * b->n;
    seen += b->n;
  }
  dpm_exec_fini(&x);
  dpm_ws_fini(&ws);
  if (s) return s;
  *loss = seen ? sum_loss / seen : NAN;
  *accuracy = seen && m->accuracy ? sum_acc / seen : NAN;
  return DPM_OK;
}

int64_t dpm_trainer_steps_per_epoch(const dpm_trainer *t) {
  return dpm_reader_size(t->reader) / t->model.batch;
}

int dpm_trainer_batch(const dpm_trainer *t) { return t->model.batch; }
const dpm_model *dpm_trainer_model(const dpm_trainer *t) { return &t->model; }
dpm_workspace *dpm_trainer_workspace(dpm_trainer *t) { return &t->ws; }

void dpm_trainer_destroy(dpm_trainer *t) {
  if (!t) return;
  dpm_reader_destroy(t->reader);
  dpm_reader_destroy(t->eval_reader);
  dpm_exec_fini(&t->train);
  dpm_ws_fini(&t->ws);
  dpm_ctx_fini(&t->ctx);
  dpm_model_fini(&t->model);
  free(t->losses);
  free(t->eval_images);
  free(t->eval_labels);
  free(t);
}
