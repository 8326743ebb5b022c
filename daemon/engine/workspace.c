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

/* This workspace's own blob `name`, created (no storage) if absent. */
static dpm_blob *own(dpm_workspace *ws, const char *name) {
  int i = dpm_strmap_get(&ws->index, name);
  dpm_blob *b = i >= 0 ? ws->blobs[i] : NULL;
  if (!b) {
    if (ws->n == ws->cap) {
      int cap = ws->cap ? ws->cap * 2 : 64;
      dpm_blob **p = realloc(ws->blobs, (size_t)cap * sizeof *p);
      if (!p) return NULL;
      ws->blobs = p;
      ws->cap = cap;
    }
    if (!(b = calloc(1, sizeof *b)) || !(b->name = strdup(name)) ||
        dpm_strmap_put(&ws->index, name, ws->n)) {
      if (b) free(b->name);
      free(b);
      return NULL;
    }
    b->t.dev = ws->dev;
    ws->blobs[ws->n++] = b;
  }
  return b;
}

dpm_status dpm_ws_ensure(dpm_workspace *ws, const char *name, dpm_blob_kind kind,
                         const dpm_shape *s, dpm_blob **out) {
  if (ws->parent && dpm_strmap_get(&ws->index, name) < 0) {
    dpm_blob *p = dpm_ws_find(ws->parent, name);
    if (p && !p->shared && dpm_shape_equal(&p->t.shape, s)) return *out = p, DPM_OK;
  }
  dpm_blob *b = own(ws, name);
  if (!b) return DPM_NOMEM;
  b->kind = kind;
  if (!b->t.data || !dpm_shape_equal(&b->t.shape, s))
    if (dpm_tensor_resize(&b->t, s)) return DPM_NOMEM;
  *out = b;
  return DPM_OK;
}

dpm_status dpm_ws_view_shared(dpm_workspace *ws, const char *name, dpm_blob_kind kind,
                              const dpm_shape *s, dpm_dptr data, dpm_blob **out) {
  dpm_blob *b = own(ws, name);
  if (!b) return DPM_NOMEM;
  b->kind = kind;
  b->shared = 1;
  dpm_tensor_view_mem(&b->t, s, data);
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
