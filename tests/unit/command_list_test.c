/* The command list (common/commands.h) against the protocol: every oneof
 * case of Request is a command of the list, once, under its field's name,
 * and every command of the list that sends a request is a case of
 * Request; names are unique; the verbs dpmctl has carry their help. dpmd's
 * handlers: commands_test.c; dpmctl's verbs: client_test.c. */
#include "common/commands.h"
#include "test.h"

/* The list's rows that carry Request case `id`. */
static int rows_of_request(unsigned id, int *row) {
  int n = 0;
  for (int i = 0; i < DPM_CMD_COUNT; i++)
    if (dpm_commands[i].request && (unsigned)dpm_commands[i].request == id) {
      *row = i;
      n++;
    }
  return n;
}

TEST(command_list_matches_the_proto) {
  const ProtobufCMessageDescriptor *rq = &dpm__request__descriptor;
  int oneofs = 0, ok = 1;
  /* proto -> list: each case once, under its field's name */
  for (unsigned i = 0; i < rq->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &rq->fields[i];
    if (!(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)) continue;
    oneofs++;
    int row = -1, n = rows_of_request(f->id, &row);
    if (n != 1) {
      dpm_test_fail(__FILE__, __LINE__, "Request.%s (%u) is in the command list %d times",
                    f->name, f->id, n);
      ok = 0;
    } else if (strcmp(dpm_commands[row].field, f->name)) {
      dpm_test_fail(__FILE__, __LINE__, "Request case %u is field %s, the list says %s",
                    f->id, f->name, dpm_commands[row].field);
      ok = 0;
    } else if (dpm_command_of_request((int)f->id) != &dpm_commands[row]) {
      dpm_test_fail(__FILE__, __LINE__, "dpm_command_of_request(%u)", f->id);
      ok = 0;
    }
  }
  /* list -> proto: every request is a oneof case of Request */
  int requests = 0;
  for (int i = 0; i < DPM_CMD_COUNT; i++) {
    const dpm_command *k = &dpm_commands[i];
    if (!k->request) {
      if (k->field || k->flags) {
        dpm_test_fail(__FILE__, __LINE__, "%s sends no request but has a field or flags",
                      k->name);
        ok = 0;
      }
      continue;
    }
    requests++;
    const ProtobufCFieldDescriptor *f =
        protobuf_c_message_descriptor_get_field(rq, (unsigned)k->request);
    if (!f || !(f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF)) {
      dpm_test_fail(__FILE__, __LINE__, "%s: case %d is not a command of Request",
                    k->name, k->request);
      ok = 0;
    }
  }
  CHECK(ok);
  CHECK_INT(requests, oneofs);
  CHECK_INT(oneofs, 25);
  CHECK(dpm_command_of_request(0) == NULL);
  CHECK(dpm_command_of_request(1000) == NULL);
  CHECK(
      !strcmp(dpm_command_of_request(DPM__REQUEST__COMMAND_GET_BLOB)->name, "get-blob"));
  CHECK(!strcmp(dpm_command_of_request(DPM__REQUEST__COMMAND_VERSION_INFO)->name,
                "version"));
}

TEST(command_list_names_once_with_help) {
  int ok = 1;
  for (int i = 0; i < DPM_CMD_COUNT; i++) {
    const dpm_command *k = &dpm_commands[i];
    if (!k->name || !*k->name || !k->summary || !*k->summary) {
      dpm_test_fail(__FILE__, __LINE__, "row %d: no name or summary", i);
      return;
    }
    for (int j = 0; j < i; j++)
      if (!strcmp(dpm_commands[j].name, k->name)) {
        dpm_test_fail(__FILE__, __LINE__, "%s is in the list twice", k->name);
        ok = 0;
      }
    int internal = (k->flags & DPM_CMDF_INTERNAL) != 0;
    /* a verb's usage starts with its name; an internal command has none */
    if (internal != !k->usage || internal != !k->text || internal != !k->example ||
        (k->usage && strncmp(k->usage, k->name, strlen(k->name)))) {
      dpm_test_fail(__FILE__, __LINE__, "%s: usage, text and example", k->name);
      ok = 0;
    }
    if (!k->request && internal) {
      dpm_test_fail(__FILE__, __LINE__, "%s: internal but sends no request", k->name);
      ok = 0;
    }
  }
  CHECK(ok);
}
