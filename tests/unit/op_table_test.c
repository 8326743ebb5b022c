/* The op table (daemon/ops/list.h, registry.c): one def per id, named as the
 * list names it, found by name from many threads at once, the first lookup
 * included. */
#include <fcntl.h>
#include <pthread.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/wait.h>

#include "engine/op.h"
#include "test.h"

extern char **environ;

/* The list as the test reads it, independently of the table. */
static const char *const list_names[] = {
#define XX(id, name) name,
    DPM_OP_MAP(XX)
#undef XX
};
#define ONE(id, name) +1
_Static_assert(DPM_OP_COUNT == 0 DPM_OP_MAP(ONE), "DPM_OP_COUNT counts the list");
#undef ONE
_Static_assert(sizeof list_names / sizeof *list_names == DPM_OP_COUNT, "list names");

TEST(op_table_has_the_def_of_every_listed_op) {
  int n = -1;
  const dpm_op_def *const *all = dpm_op_all(&n);
  CHECK_INT(n, DPM_OP_COUNT);
  for (int i = 0; i < DPM_OP_COUNT; i++) {
    const dpm_op_def *def = dpm_op_get((dpm_op_id)i);
    if (!def || def != all[i] || (int)def->id != i || strcmp(def->name, list_names[i])) {
      dpm_test_fail(__FILE__, __LINE__, "op #%d '%s': def %s, id %d, name '%s'", i,
                    list_names[i], def ? "present" : "NULL", def ? (int)def->id : -1,
                    def ? def->name : "");
      return;
    }
    for (int j = 0; j < i; j++) CHECK(strcmp(list_names[j], list_names[i]));
  }
  CHECK(dpm_op_get(DPM_OP_CONV_GRADIENT) == dpm_op_find("ConvGradient"));
  CHECK(dpm_op_get(DPM_OP_CONSTANT_FILL)->flags == 0); /* a spec may use fills */
  CHECK(dpm_op_get(DPM_OP_ALLREDUCE)->flags & DPM_OP_HIDDEN);
}

TEST(op_find_takes_exact_names_only) {
  for (int i = 0; i < DPM_OP_COUNT; i++)
    CHECK(dpm_op_find(list_names[i]) == dpm_op_get((dpm_op_id)i));
  static const char *const unknown[] = {"",      "fc",     "FCGradientX", "Conv ",
                                        "A",     "Zzz",    "Relu\n",      "Gradient",
                                        "Adam_", "MaxPoo", "SGD2"};
  for (size_t k = 0; k < sizeof unknown / sizeof *unknown; k++)
    CHECK(dpm_op_find(unknown[k]) == NULL);
}

/* ---- concurrent lookups ---------------------------------------------------- */

#define THREADS 8
#define ROUNDS 200

typedef struct {
  pthread_barrier_t *start;
  int first;  /* op the thread looks up first, so first calls differ */
  int missed; /* lookups that did not give the listed def */
} finder;

static void *find_all(void *arg) {
  finder *f = arg;
  pthread_barrier_wait(f->start);
  for (int r = 0; r < ROUNDS; r++)
    for (int k = 0; k < DPM_OP_COUNT; k++) {
      int i = (f->first + k) % DPM_OP_COUNT;
      f->missed += dpm_op_find(list_names[i]) != dpm_op_get((dpm_op_id)i);
    }
  return NULL;
}

/* Eight threads released together look every op up by name. In a process of
 * its own (op_find_in_a_fresh_process) these are the first lookups. */
TEST(op_find_from_8_threads) {
  pthread_barrier_t start;
  pthread_t t[THREADS];
  finder f[THREADS];
  CHECK_INT(pthread_barrier_init(&start, NULL, THREADS), 0);
  int made = 0;
  for (; made < THREADS; made++) {
    f[made] = (finder){.start = &start, .first = made * 7};
    if (pthread_create(&t[made], NULL, find_all, &f[made])) break;
  }
  CHECK_INT(made, THREADS); /* else the others wait at the barrier forever */
  int missed = 0;
  for (int i = 0; i < THREADS; i++) {
    pthread_join(t[i], NULL);
    missed += f[i].missed;
  }
  pthread_barrier_destroy(&start);
  CHECK_INT(missed, 0);
}

/* The runner started again with only op_find_from_8_threads selected: nothing
 * has looked an op up in that process before its threads do. */
TEST(op_find_in_a_fresh_process) {
  char *argv[] = {"unit", "op_find_from_8_threads", NULL};
  posix_spawn_file_actions_t fa;
  CHECK_INT(posix_spawn_file_actions_init(&fa), 0);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  pid_t pid;
  int rc = posix_spawn(&pid, "/proc/self/exe", &fa, NULL, argv, environ);
  posix_spawn_file_actions_destroy(&fa);
  CHECK_INT(rc, 0);
  int status = 0;
  CHECK_INT(waitpid(pid, &status, 0), pid);
  if (!WIFEXITED(status) || WEXITSTATUS(status))
    dpm_test_fail(__FILE__, __LINE__,
                  "build/tests/unit op_find_from_8_threads failed (status %#x)", status);
}
