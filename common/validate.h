/* The one validation of a model spec, on its protobuf form: what dpmd
 * accepts at submit (and at restore), what dpm-train and the trainer accept,
 * and what the YAML front end checks last. It runs once where a spec enters
 * a process; dpm_spec_check (checked_spec.h) runs it and carries the result
 * typed to the later stages, which do not run it again. Every value a client could send
 * is checked here before anything is built: enum values, ranges, devices in
 * canonical form, names, losses, the eval section, the checkpoint policy.
 * What needs the op table and shapes (op types, arguments, blob wiring, a
 * scalar loss) is the engine's, at build, still before any tensor exists.
 *
 * Errors: DPM_SPEC, "SOURCE:LINE: section.key ...", the source and every
 * quoted value escaped (common/escape.h); the line is the section's when the
 * spec came from a file, else left out. Pure: any thread. */
#ifndef DPM_COMMON_VALIDATE_H
#define DPM_COMMON_VALIDATE_H

#include <stdint.h>

#include "common/device.h"
#include "dpm/status.h"
#include "proto/dpm.pb-c.h"

#define DPM_SPEC_MAX_NAME 64            /* model name: 1..64 of [A-Za-z0-9._-] */
#define DPM_SPEC_MAX_BLOB_NAME 255      /* blob names (a checkpoint entry's limit) */
#define DPM_SPEC_MAX_BATCH (1u << 20)   /* examples per device per step; eval batch */
#define DPM_SPEC_MAX_GLOBAL (1u << 30)  /* batch x devices x shards */
#define DPM_SPEC_MAX_PREFETCH 64        /* input.prefetch */
#define DPM_SPEC_MAX_EXAMPLES 100000000 /* synthetic num_examples */
#define DPM_SPEC_MAX_SIDE 65536         /* synthetic shape entries */
#define DPM_SPEC_MAX_PIXELS (1u << 26)  /* synthetic C x H x W */
#define DPM_SPEC_MAX_CLASSES (1u << 24) /* num_classes */
#define DPM_SPEC_MAX_SHARDS 256         /* parallel.shards: daemons of a job */
#define DPM_SPEC_MAX_TIMEOUT_MS 3600000 /* parallel.rendezvous.timeout_ms */
#define DPM_SPEC_MAX_SHARD_FILES 100000 /* input.shards, eval.shards (expanded) */
#define DPM_SPEC_MAX_CROP 4096          /* input.image.crop and resize */
#define DPM_SPEC_MAX_DECODE_THREADS 64  /* input.image.decode_threads */
#define DPM_SPEC_MAX_IMAGE_PIXELS (1ull << 30) /* input.image.max_pixels */
/* input.scale: finite, > 0 (a predictor's input_scale must be) and at most
 * 256: a pixel byte (0..255) times it stays under 2^16, so the squares BN
 * and the losses take of inputs stay under 2^32 and their sums over any
 * batch far inside float's range; usual scales are 1/255 to 1. */
#define DPM_SPEC_MAX_SCALE 256.0

/* 1 for the image readers' kinds (tar, lmdb, folder). */
int dpm_reader_kind_is_image(Dpm__ReaderKind k);

/* 1 for a usable model name: 1..DPM_SPEC_MAX_NAME of A-Z a-z 0-9 . _ -, not
 * starting with '.' (it names a directory in dpmd's state dir). */
int dpm_model_name_valid(const char *name);
/* 1 for a usable blob name: 1..DPM_SPEC_MAX_BLOB_NAME bytes without control
 * bytes or '/': '/' separates a replica's scope from a name ("cpu_1/fc1_w"
 * in get-blob), and checkpoints and predictors keep what follows the last
 * one, so a spec's own names hold none. */
int dpm_blob_name_valid(const char *name);

/* A daemon of a fleet (parallel.shards): tcp://HOST:PORT (host of
 * [A-Za-z0-9.-] or [IPv6], port 1..65535) or ipc:///PATH (absolute, at
 * most 200 bytes, no control bytes). */
int dpm_shard_endpoint_valid(const char *ep);
/* A rendezvous store (parallel.rendezvous.store): "daemon",
 * "redis://HOST:PORT" or "file:///DIR" (absolute as above). */
int dpm_store_url_valid(const char *url);
/* A network interface name: 1..15 of [A-Za-z0-9._-@], not "." or "..". */
int dpm_interface_name_valid(const char *name);

dpm_status dpm_spec_validate(const Dpm__ModelSpec *spec, dpm_err *err);
/* The same validation, with the spec's devices typed: devs (NULL: not
 * wanted) has room for parallel.devices (at most DPM_MAX_DEVICES: more are
 * refused before devs is touched) and receives each name parsed, in order.
 * given: devs holds them parsed already (by whoever checked the names
 * first, with its own messages: dpmd's device check), so they are not
 * parsed again and only the list's rules (one kind, each once) are
 * checked. common/checked_spec.h is its one caller outside this file. */
dpm_status dpm_spec_validate_devices(const Dpm__ModelSpec *spec, dpm_device *devs,
                                     int given, dpm_err *err);
/* "N" (every N iterations) or "Ns" (every N seconds), N a whole number;
 * "0" and "0s": never. Fills *p (an initialised CheckpointPolicy). Returns 0,
 * or -1 for anything else. */
int dpm_checkpoint_every_parse(const char *s, Dpm__CheckpointPolicy *p);
/* The checkpoint policy alone (for a submit's override). */
dpm_status dpm_checkpoint_policy_validate(const Dpm__CheckpointPolicy *p, dpm_err *err);

#endif
