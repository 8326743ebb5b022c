/* The model spec front end: a YAML spec file (README.md, "Model spec")
 * -> the protobuf Dpm__ModelSpec that dpmctl submits and the engine builds.
 *
 * What the parser checks: YAML syntax; the set of keys in every section
 * (unknown, duplicate and missing required keys); the type of every value
 * (strings, integers, numbers, true/false, enum names, lists); value ranges
 * and a few cross-field rules (idx reader needs images and labels, shard_id <
 * num_shards, lr policy poly needs max_iter, multistep needs stepvalues,
 * devices well formed and unique). What it leaves to the engine: operator
 * types, their argument names and values, blob wiring and shapes; for that
 * every operator carries its 1-based line and column.
 *
 * Scalar typing: for schema keys a value must be written as the key expects
 * (an integer key rejects 1.5 and "64"; a boolean is exactly true or false).
 * Operator arguments are typed by how the scalar is written: an integer
 * literal -> i, any other number (1e-3, .5, -0.1) -> f, true/false -> i (1/0),
 * anything else -> s; quoted and block scalars are always s; a list of
 * numbers -> ints if all are integer literals, else floats.
 *
 * Errors: every function returns a dpm_status; on failure err (if non-NULL)
 * holds "SOURCE:LINE:COL: message", 1-based, at the offending node (a
 * missing key is reported at the start of the mapping that lacks it; errors
 * inside an operator read "...: op #N (TYPE): message", N 1-based). Spec
 * problems are DPM_SPEC, an unreadable file DPM_IO, exhausted memory
 * DPM_NOMEM. Anchors/aliases, tags and several documents are refused; input
 * larger than DPM_SPEC_MAX_BYTES is refused (DPM_SPEC). No input crashes the
 * parser and no error path leaks.
 *
 * Ownership: on success *out is a new spec owned by the caller, freed with
 * dpm_spec_free(); on failure *out is NULL. Every field is a separate
 * malloc() allocation, exactly as protobuf-c's unpack (default allocator)
 * makes them, so dpm_spec_free() also frees a spec from
 * dpm__model_spec__unpack(NULL, ...), and parse results can be packed.
 *
 * Threads: no global state; any function may run on any thread, on
 * different specs at once. */
#ifndef DPM_SPEC_SPEC_H
#define DPM_SPEC_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "dpm/status.h"
#include "proto/dpm.pb-c.h"

/* Largest spec accepted, in bytes. */
#define DPM_SPEC_MAX_BYTES (16u << 20)
/* Largest update.accumulate_steps accepted. */
#define DPM_SPEC_MAX_ACCUMULATE 65536u

/* precision.loss_scale, read (GradScaler's semantics, docs/SPEC.md). */
enum { DPM_LOSS_SCALE_NONE, DPM_LOSS_SCALE_STATIC, DPM_LOSS_SCALE_DYNAMIC };
#define DPM_LOSS_SCALE_INIT 65536.0 /* dynamic: the first scale, 2^16 */
/* The kind of loss scale `text` names ("none" or NULL, "dynamic", a
 * positive number) and its (first) scale in *scale (1 for none); -1 when
 * text is none of these. Pure. */
int dpm_spec_loss_scale(const char *text, double *scale);

/* Reads the file at path and parses it (source = path in messages and in
 * spec->source). A file that cannot be opened or read is DPM_IO. */
dpm_status dpm_spec_load(const char *path, Dpm__ModelSpec **out, dpm_err *err);

/* dpm_spec_load for a program that runs the spec it reads (dpm-train):
 * the spec is checked once into *out (common/checked_spec.h: validated,
 * hashed, devices parsed) instead of validated alone; the same errors. */
struct dpm_checked_spec;
dpm_status dpm_spec_load_checked(const char *path, struct dpm_checked_spec **out,
                                 dpm_err *err);

/* Parses text[0..len) (need not be NUL-terminated). source names the text in
 * messages and is copied to spec->source; NULL means "<spec>" in messages
 * and no spec->source. */
dpm_status dpm_spec_parse(const char *text, size_t len, const char *source,
                          Dpm__ModelSpec **out, dpm_err *err);

/* Frees a spec from dpm_spec_parse/dpm_spec_load (or protobuf unpack with
 * the default allocator). NULL is fine. */
void dpm_spec_free(Dpm__ModelSpec *spec);

/* One key of the spec's schema, as the parser's tables give it, for the
 * reference (docs/SPEC.md, written by tests/tools/spec_doc.c). */
typedef struct dpm_spec_key {
  const char *section; /* "" (top level), "input", "update.lr", ... */
  const char *key;     /* as written in YAML */
  char type[200];      /* what it takes: "integer >= 1", "number in [0, 1)",
                          "one of: sgd, momentum_sgd, adam", "mapping (see update.lr)" */
  char def[64];        /* its default (dpm.proto's), "" when it has none */
  int required;        /* the spec must have it */
  const char *alias;   /* another key for the same field ("start_multiplier"), or NULL */
} dpm_spec_key;
typedef void (*dpm_spec_key_fn)(void *ctx, const dpm_spec_key *k);
/* Calls fn for every key of every section, sections in the order they
 * nest (top level, then input, update, update.lr, ...), keys in table
 * order. */
void dpm_spec_describe(dpm_spec_key_fn fn, void *ctx);

/* 64-bit FNV-1a over the protobuf encoding of the spec with its position
 * fields cleared: precisely, over the packed ModelSpec with `source`,
 * `name`, `parallel`, `checkpoint`, `forward`, `input.shard_id`,
 * `input.num_shards`, `precision.compute` (and `precision` when nothing else
 * in it is set) and every `line` field left out, followed by each
 * packed forward Operator in order with `line` and `column` left out.
 * Moving the file, editing comments, re-indenting, renaming the model,
 * changing its devices, shards or net type, when it checkpoints or its
 * compute precision keeps the hash (a checkpoint loads into the same model
 * on other devices and hosts, and into it computing in bf16 or fp32: the
 * checkpoint holds the fp32 masters either way); any other change to a value
 * (including writing a default explicitly) changes it. Checkpoints store it
 * to recognise the spec they belong to. Returns 0 for NULL. */
uint64_t dpm_spec_hash(const Dpm__ModelSpec *spec);

#endif
