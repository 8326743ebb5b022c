/* The op table: every def of the op list (ops/list.h) indexed by its id, and
 * the index by name that dpm_op_find searches.
 *
 * The table is a static const array, complete at compile time. The name
 * index is built once, by the first dpm_op_find of any thread
 * (pthread_once), and read-only after. */
#include <assert.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/op.h"
#include "ops/families.h"

static const dpm_op_def *const table[] = {
#define XX(id, name) [DPM_OP_##id] = &DPM_OP_DEF(id),
    DPM_OP_MAP(XX)
#undef XX
};
_Static_assert(sizeof table / sizeof *table == DPM_OP_COUNT, "one def per op id");

const dpm_op_def *dpm_op_get(dpm_op_id id) {
  assert((unsigned)id < DPM_OP_COUNT);
  return table[id];
}

const dpm_op_def *const *dpm_op_all(int *count) {
  *count = DPM_OP_COUNT;
  return table;
}

/* ---- by name ---------------------------------------------------------------- */

static dpm_op_id by_name[DPM_OP_COUNT]; /* ids in strcmp order of their names */
static pthread_once_t by_name_once = PTHREAD_ONCE_INIT;

static int name_order(const void *a, const void *b) {
  return strcmp(table[*(const dpm_op_id *)a]->name, table[*(const dpm_op_id *)b]->name);
}

static void sort_names(void) {
  for (int i = 0; i < DPM_OP_COUNT; i++) by_name[i] = (dpm_op_id)i;
  qsort(by_name, DPM_OP_COUNT, sizeof *by_name, name_order);
}

const dpm_op_def *dpm_op_find(const char *name) {
  pthread_once(&by_name_once, sort_names);
  size_t lo = 0, hi = DPM_OP_COUNT;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(name, table[by_name[mid]]->name);
    if (!c) return table[by_name[mid]];
    if (c < 0)
      hi = mid;
    else
      lo = mid + 1;
  }
  return NULL;
}
