/* The op table (tests/opcases/cases.c) on the CPU: every case runs forward
 * and backward through the CPU kernels, and every case whose gradient can
 * be checked passes central finite differences at its tolerance. The device
 * harness (tests/gpu/gpu_test.c) runs the same cases on cuda, fenced and
 * cpu devices. */
#include "test.h"
#include "tests/opcases/oprun.h"

static const char *label(const opcase *c) { return c->name ? c->name : c->op; }

TEST(optest_table_runs_on_the_cpu) {
  int n, bad = 0, grads = 0;
  const opcase *cases = opcase_table(&n);
  for (int i = 0; i < n; i++) {
    oprun_result r;
    dpm_err err = {0};
    if (oprun_case(&cases[i], NULL, &r, NULL, &err)) {
      printf("    %s: %s\n", label(&cases[i]), err.msg);
      bad++;
    }
    for (int k = 0; k < r.n; k++) grads += !strncmp(r.what[k], "grad", 4);
    oprun_result_fini(&r);
  }
  printf("    %d cases forward and backward, %d gradients\n", n, grads);
  CHECK_INT(bad, 0);
}

TEST(optest_table_gradcheck_on_the_cpu) {
  int n, checked = 0, bad = 0;
  double worst = 0; /* of measured / tolerance */
  const opcase *cases = opcase_table(&n);
  for (int i = 0; i < n; i++) {
    const opcase *c = &cases[i];
    if (!opcase_fd_applies(c)) continue;
    oprun h;
    oprun_result r;
    dpm_err err = {0};
    double tol = OPCASE_FD_TOL, g = -1;
    if (oprun_case(c, NULL, &r, &h, &err))
      printf("    %s: %s\n", label(c), err.msg);
    else
      g = oprun_gradcheck_case(&h, c, &r, &tol), oprun_fini(&h);
    oprun_result_fini(&r);
    checked++;
    dpm_test_margin(__FILE__, __LINE__, g, tol);
    if (!(g >= 0 && g <= tol)) {
      printf("    gradient check of %s: worst %.3g (tol %g)\n", label(c), g, tol);
      bad++;
    }
    if (!(g / tol <= worst)) worst = g / tol;
  }
  printf("    %d cases checked by finite differences, worst %.2g of its tolerance\n",
         checked, worst);
  CHECK(checked > 0);
  CHECK_INT(bad, 0);
}

/* Every op of the op table has a case, or a check of its own on devices;
 * every case has a label of its own (its seed comes from it). */
TEST(optest_table_covers_every_op) {
  int n, count, missing = 0;
  int has[DPM_OP_COUNT] = {0};
  const opcase *cases = opcase_table(&n);
  for (int i = 0; i < n; i++) {
    const dpm_op_def *def = dpm_op_find(cases[i].op);
    CHECK(def != NULL);
    CHECK(cases[i].name != NULL);
    for (int j = 0; j < i; j++) CHECK(strcmp(cases[i].name, cases[j].name) != 0);
    has[def->id] = 1;
    /* the gradient ops run in the case's gradient net */
    oprun_result r;
    dpm_err err = {0};
    if (!oprun_case(&cases[i], NULL, &r, NULL, &err))
      for (int k = 0; k < r.n_ops; k++) has[r.ops[k]] = 1;
    oprun_result_fini(&r);
  }
  const dpm_op_def *const *all = dpm_op_all(&count);
  for (int i = 0; i < count; i++)
    if (!has[all[i]->id] && !opcase_own_check(all[i]->id)) {
      printf("    op %s has no case\n", all[i]->name);
      missing++;
    }
  CHECK_INT(missing, 0);
}
