/* The model registry: the models a dpmd serves, by name. Find, add, remove
 * and iterate; nothing else (starting and ending models is model.h's).
 *
 * Threads: the loop thread only. Model threads never see the registry: a
 * model whose thread has ended tells the loop (dpmd_model_exited), and the
 * loop removes it.
 *
 * Ownership: the registry holds pointers to models it does not own (the
 * loop frees a model after removing it, once its thread has exited), and
 * each model's name as given to dpmd_registry_add, which must stay valid
 * while the model is registered (the model's own, immutable name).
 *
 * Order: iteration runs over positions 0 .. count-1; removing a model moves
 * the last one into its place. A model that is ending (dpmd_model_ending)
 * is still registered, so its name stays taken until it has exited.
 *
 * Errors: only dpmd_registry_reserve can fail (DPM_NOMEM). */
#ifndef DPMD_REGISTRY_H
#define DPMD_REGISTRY_H

#include "dpm/status.h"

struct dpmd_model;
typedef struct dpmd_registry dpmd_registry;

dpm_status dpmd_registry_create(dpmd_registry **out, dpm_err *err);
/* Frees the registry, not the models. */
void dpmd_registry_destroy(dpmd_registry *r);
/* The model named `name`, or NULL (also for a NULL name). */
struct dpmd_model *dpmd_registry_find(const dpmd_registry *r, const char *name);
/* Makes room for one more model, so that the add that follows cannot fail
 * (add once the model has started, and it must not be lost). */
dpm_status dpmd_registry_reserve(dpmd_registry *r, dpm_err *err);
/* Adds m under name (not registered yet) into the room reserved. */
void dpmd_registry_add(dpmd_registry *r, const char *name, struct dpmd_model *m);
/* Removes m; nothing happens if it is not registered. */
void dpmd_registry_remove(dpmd_registry *r, const struct dpmd_model *m);
int dpmd_registry_count(const dpmd_registry *r);
/* The model at position i, 0 <= i < count. */
struct dpmd_model *dpmd_registry_at(const dpmd_registry *r, int i);

#endif
