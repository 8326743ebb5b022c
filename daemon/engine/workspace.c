/* Workspace: name -> blob, owning the tensors. */
#include "engine/workspace.h"

#include <stdlib.h>
#include <string.h>

dpm_blob *dpm_ws_find(const dpm_workspace *ws, const char *name) {
  for (; ws; ws = ws->parent) {
    int i = dpm_strmap_get(&ws->index, name);
    if (i >= 0) return ws->blobs[i];
  }
  return NULL;
}

dpm_status dpm_ws_ensure(dpm_workspace *ws, const char *name, dpm_blob_kind kind,
                         const dpm_shape *s, dpm_blob **out) {
  int i = dpm_strmap_get(&ws->index, name);
  dpm_blob *b = i >= 0 ? ws->blobs[i] : NULL;
  if (!b && ws->parent) {
    dpm_blob *p = dpm_ws_find(ws->parent, name);
    if (p && dpm_shape_equal(&p->t.shape, s)) return *out = p, DPM_OK;
  }
  if (!b) {
    if (ws->n == ws->cap) {
      int cap = ws->cap ? ws->cap * 2 : 64;
      dpm_blob **p = realloc(ws->blobs, (size_t)cap * sizeof *p);
      if (!p) return DPM_NOMEM;
      ws->blobs = p;
      ws->cap = cap;
    }
    if (!(b = calloc(1, sizeof *b)) || !(b->name = strdup(name)) ||
        dpm_strmap_put(&ws->index, name, ws->n)) {
      if (b) free(b->name);
      free(b);
      return DPM_NOMEM;
    }
    b->t.dev = ws->dev;
    ws->blobs[ws->n++] = b;
  }
  b->kind = kind;
  if (!b->t.data || !dpm_shape_equal(&b->t.shape, s))
    if (dpm_tensor_resize(&b->t, s)) return DPM_NOMEM;
  *out = b;
  return DPM_OK;
}

size_t dpm_ws_bytes(const dpm_workspace *ws) {
  size_t total = 0;
  for (int i = 0; i < ws->n; i++) total += ws->blobs[i]->t.capacity;
  return total;
}

void dpm_ws_fini(dpm_workspace *ws) {
  for (int i = 0; i < ws->n; i++) {
    dpm_tensor_fini(&ws->blobs[i]->t);
    free(ws->blobs[i]->name);
    free(ws->blobs[i]);
  }
  free(ws->blobs);
  dpm_strmap_fini(&ws->index);
  memset(ws, 0, sizeof *ws);
}
