/* Races, run under ThreadSanitizer (build/tests/race; make test), where a
 * data race is a failure whether or not it changed a result this time:
 *  - several models restored at once, as dpmd restores the models of its
 *    state dir, each on its own thread: spec text parsed, ops looked up by
 *    name (in this fresh process, these are the first lookups), gradients
 *    and plans built, a checkpoint loaded and synced to two replicas, steps;
 *  - several threads loading one predictor directory and running it;
 *  - several threads getting and releasing files of one data cache.
 * Each thread's result must equal, bit for bit, the same work done alone. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/spec.h"
#include "dpm/predictor.h"
#include "io/datacache.h"
#include "test.h"
#include "trainer_fixture.h"

#define THREADS 4

typedef struct {
  const char *forward, *ckpt;
  pthread_barrier_t *go;
  dpm_tensor w; /* fc1 or conv1's weights, after the load and 3 steps */
  uint64_t iter;
} restorer;

static const char *first_param(const char *forward) {
  return strstr(forward, "Conv") ? "conv1_w" : "fc1_w";
}

/* What dpmd's model thread does on restore, then 3 steps. */
static void *restore(void *arg) {
  restorer *r = arg;
  if (r->go) pthread_barrier_wait(r->go);
  Dpm__ModelSpec *spec = tf_spec(r->forward, 8, 3, 0.01, "dag", 65536);
  dpm_trainer *t = tf_trainer(spec, 2, NULL);
  dpm_err err = {0};
  if (t && dpm_trainer_load(t, NULL, r->ckpt, &err)) printf("    load: %s\n", err.msg);
  else if (t && tf_steps(t, 3)) {
    r->iter = dpm_trainer_iter(t);
    if (dpm_trainer_read_blob(t, first_param(r->forward), &r->w, &err))
      printf("    read: %s\n", err.msg);
  }
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  return NULL;
}

static char *temp_dir(void) {
  char tmpl[] = "/tmp/dpm-race-XXXXXX";
  return mkdtemp(tmpl) ? strdup(tmpl) : NULL;
}

static void remove_dir(char *dir) {
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  if (system(cmd)) printf("    could not remove %s\n", dir);
  free(dir);
}

/* A checkpoint of `forward` after 5 steps on two replicas. */
static int checkpoint(const char *forward, const char *path) {
  Dpm__ModelSpec *spec = tf_spec(forward, 8, 3, 0.01, "dag", 65536);
  dpm_trainer *t = tf_trainer(spec, 2, NULL);
  dpm_err err = {0};
  int ok = t && tf_steps(t, 5) && !dpm_trainer_checkpoint(t, NULL, path, &err);
  if (!ok && err.msg[0]) printf("    checkpoint: %s\n", err.msg);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  return ok;
}

/* First in this file. */
TEST(models_restored_at_once_equal_one_restored_alone) {
  char *dir = temp_dir();
  CHECK(dir);
  char mlp[256], cnn[256];
  snprintf(mlp, sizeof mlp, "%s/mlp.ckpt", dir);
  snprintf(cnn, sizeof cnn, "%s/cnn.ckpt", dir);
  restorer r[THREADS], alone[2];
  pthread_t th[THREADS];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, THREADS);
  for (int i = 0; i < THREADS; i++)
    r[i] = (restorer){.forward = i % 2 ? CNN_FORWARD : MLP_FORWARD,
                      .ckpt = i % 2 ? cnn : mlp,
                      .go = &go};
  /* the checkpoints come from a child process, so this one's first op
   * lookups are the restorers' */
  pid_t pid = fork();
  if (!pid) _exit(checkpoint(MLP_FORWARD, mlp) && checkpoint(CNN_FORWARD, cnn) ? 0 : 1);
  int st = -1, ok = pid > 0 && waitpid(pid, &st, 0) == pid && st == 0;
  for (int i = 0; ok && i < THREADS; i++)
    CHECK(!pthread_create(&th[i], NULL, restore, &r[i]));
  for (int i = 0; ok && i < THREADS; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&go);
  for (int k = 0; ok && k < 2; k++) {
    alone[k] = r[k];
    alone[k].go = NULL;
    alone[k].w = (dpm_tensor){0};
    restore(&alone[k]);
  }
  for (int i = 0; ok && i < THREADS; i++) {
    const restorer *a = &alone[i % 2];
    if (r[i].iter != 8 || !r[i].w.data || !a->w.data ||
        memcmp(r[i].w.data, a->w.data, dpm_shape_bytes(&a->w.shape)))
      dpm_test_fail(__FILE__, __LINE__, "model %d: iteration %llu, weights %s", i,
                    (unsigned long long)r[i].iter,
                    r[i].w.data ? "differ from a lone restore" : "missing");
  }
  for (int i = 0; i < THREADS; i++) dpm_tensor_fini(&r[i].w);
  for (int k = 0; ok && k < 2; k++) dpm_tensor_fini(&alone[k].w);
  CHECK(ok);
  remove_dir(dir);
}

typedef struct {
  const char *dir;
  pthread_barrier_t *go;
  float y[4 * 10];
  int ok;
} loader;

static float input[4 * 784];

static void *load_and_run(void *arg) {
  loader *l = arg;
  if (l->go) pthread_barrier_wait(l->go);
  dpm_predictor *p = NULL;
  dpm_err err = {0};
  const float *in[] = {input};
  const float *y;
  int64_t dims[4];
  if (dpm_predictor_load(l->dir, &p, &err) || dpm_predictor_run(p, in, 4, &err))
    printf("    predictor: %s\n", err.msg);
  else if ((y = dpm_predictor_output(p, 0, dims, NULL)) && dims[0] == 4 && dims[1] == 10)
    l->ok = (memcpy(l->y, y, sizeof l->y), 1);
  dpm_predictor_free(p);
  return NULL;
}

TEST(predictors_loaded_at_once_equal_one_loaded_alone) {
  char *dir = temp_dir();
  CHECK(dir);
  Dpm__ModelSpec *spec = tf_spec(MLP_FORWARD, 8, 3, 0.01, "dag", 65536);
  dpm_trainer *t = tf_trainer(spec, 2, NULL);
  const char *in[] = {"data"}, *out[] = {"softmax"};
  dpm_err err = {0};
  int ok = t && tf_steps(t, 5) &&
           !dpm_trainer_export_predictor(t, in, 1, out, 1, NULL, dir, &err);
  if (!ok) printf("    export: %s\n", err.msg);
  dpm_trainer_destroy(t);
  dpm_spec_free(spec);
  for (int i = 0; i < 4 * 784; i++) input[i] = (float)((i * 7919) % 256) / 255.0f;
  loader l[THREADS], alone = {.dir = dir};
  pthread_t th[THREADS];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, THREADS);
  for (int i = 0; i < THREADS; i++) l[i] = (loader){.dir = dir, .go = &go};
  for (int i = 0; ok && i < THREADS; i++)
    CHECK(!pthread_create(&th[i], NULL, load_and_run, &l[i]));
  for (int i = 0; ok && i < THREADS; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&go);
  if (ok) load_and_run(&alone);
  for (int i = 0; ok && i < THREADS; i++)
    if (!l[i].ok || !alone.ok || memcmp(l[i].y, alone.y, sizeof alone.y))
      dpm_test_fail(__FILE__, __LINE__, "loader %d: %s", i,
                    l[i].ok ? "outputs differ from a lone load" : "failed");
  CHECK(ok);
  remove_dir(dir);
}

/* ---- the data cache ------------------------------------------------------- */

typedef struct {
  dpm_data_cache *c;
  int index; /* which file the thread starts with */
  const char *paths[3];
  pthread_barrier_t *go;
  int ok;
} cache_user;

/* Gets and releases the files many times over; each copy holds its file's
 * bytes (file k: every byte k + 1). The bound fits one file, so reads,
 * hits and evictions interleave across the threads. */
static void *use_cache(void *arg) {
  cache_user *u = arg;
  pthread_barrier_wait(u->go);
  u->ok = 1;
  for (int i = 0; i < 200 && u->ok; i++) {
    int k = (i * 7 + u->index) % 3;
    dpm_data_entry *e;
    dpm_err err = {0};
    if (dpm_data_cache_get(u->c, NULL, u->paths[k], 1, &e, &err)) {
      printf("    get %s: %s\n", u->paths[k], err.msg);
      u->ok = 0;
      break;
    }
    const dpm_idx *x = dpm_data_entry_idx(e);
    for (size_t j = 0; j < x->size; j++) u->ok &= x->data[j] == k + 1;
    dpm_data_cache_release(u->c, e);
  }
  return NULL;
}

TEST(data_cache_shared_by_threads) {
  char *dir = temp_dir();
  CHECK(dir);
  char paths[3][256];
  for (int k = 0; k < 3; k++) {
    snprintf(paths[k], sizeof paths[k], "%s/labels%d", dir, k);
    uint8_t buf[8 + 1000] = {0, 0, 8, 1, 0, 0, 1000 >> 8, 1000 & 255};
    memset(buf + 8, k + 1, 1000);
    FILE *f = fopen(paths[k], "wb");
    CHECK(f && fwrite(buf, 1, sizeof buf, f) == sizeof buf && fclose(f) == 0);
  }
  dpm_data_cache *c;
  dpm_err err = {0};
  CHECK_INT(dpm_data_cache_create(1500, &c, &err), DPM_OK);
  cache_user u[THREADS];
  pthread_t th[THREADS];
  pthread_barrier_t go;
  pthread_barrier_init(&go, NULL, THREADS);
  for (int i = 0; i < THREADS; i++) {
    u[i] = (cache_user){.c = c, .index = i, .paths = {paths[0], paths[1], paths[2]},
                        .go = &go};
    CHECK(!pthread_create(&th[i], NULL, use_cache, &u[i]));
  }
  for (int i = 0; i < THREADS; i++) pthread_join(th[i], NULL);
  pthread_barrier_destroy(&go);
  dpm_data_cache_stats st;
  dpm_data_cache_stats_of(c, &st);
  dpm_data_cache_destroy(c);
  for (int i = 0; i < THREADS; i++) CHECK(u[i].ok);
  CHECK_INT(st.held_entries, 0);
  CHECK(st.bytes <= 1500);
  CHECK_INT(st.hits + st.misses, THREADS * 200);
  remove_dir(dir);
}
