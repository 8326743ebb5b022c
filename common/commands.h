/* dpm's commands, declared once (common/commands.def): for each, its name,
 * the Request's oneof case and field that carry it (none for a dpmctl verb
 * that sends no request), its flags and its help. dpmd's command table
 * (daemon/server/commands.c: the handlers) and dpmctl's verb table
 * (client/dpmctl/verbs.c: the arguments) are keyed by dpm_cmd; dpmctl's
 * help, man page and bash completion are written from this list.
 *
 * Threads: constant data and pure lookups, any thread. */
#ifndef DPM_COMMON_COMMANDS_H
#define DPM_COMMON_COMMANDS_H

#include "proto/dpm.pb-c.h"

/* A command's flags, as dpmd applies them (server/commands.h). */
enum {
  DPM_CMDF_NAMES_MODEL = 1, /* must name a registered model */
  DPM_CMDF_MUTATING = 2,    /* refused once the daemon is stopping */
  /* On a model that is one shard of a job over several daemons: refused at
   * shards but 0 unless the job's coordinator sent it (forwarded with the
   * job's secret, daemon/server/fleet/fleet.h): the coordinator acts on the whole
   * job. */
  DPM_CMDF_COORDINATOR = 4,
  /* No dpmctl verb: the daemons send it each other, or the client library
   * does (the events stream). */
  DPM_CMDF_INTERNAL = 8,
};

/* DPM_CMD_PING ... in the list's order, then DPM_CMD_COUNT. */
typedef enum {
#define DPM_REQUEST(id, ...) DPM_CMD_##id,
#define DPM_LOCAL(id, ...) DPM_CMD_##id,
#include "common/commands.def"
#undef DPM_REQUEST
#undef DPM_LOCAL
  DPM_CMD_COUNT
} dpm_cmd;

typedef struct dpm_command {
  const char *name;    /* "get-blob": dpmctl's verb, dpmd's metrics and logs */
  int request;         /* the Request's oneof case; 0: sends none (dpmctl alone) */
  const char *field;   /* the oneof's field in proto/dpm.proto; NULL with request 0 */
  unsigned flags;      /* DPM_CMDF_* */
  const char *summary; /* one line: `dpmctl help`, the man page */
  /* NULL for DPM_CMDF_INTERNAL: */
  const char *usage;   /* after "dpmctl [global options] " */
  const char *text;    /* what it does, in full: `dpmctl help VERB`, the man page */
  const char *example; /* one or more command lines ("dpmctl ..."), '\n' between */
} dpm_command;

/* Indexed by dpm_cmd. */
extern const dpm_command dpm_commands[DPM_CMD_COUNT];

/* The command carried by a Request's oneof case; NULL for a case not in the
 * list (and for 0). */
const dpm_command *dpm_command_of_request(int request);

#endif
