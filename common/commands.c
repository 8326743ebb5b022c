/* The command list (commands.h) as a table, from commands.def. */
#include "common/commands.h"

#include <stddef.h>

const dpm_command dpm_commands[DPM_CMD_COUNT] = {
#define DPM_REQUEST(id, field_, name_, flags_, summary_, usage_, text_, example_)        \
  [DPM_CMD_##id] = {.name = name_,                                                       \
                    .request = DPM__REQUEST__COMMAND_##id,                               \
                    .field = #field_,                                                    \
                    .flags = flags_,                                                     \
                    .summary = summary_,                                                 \
                    .usage = usage_,                                                     \
                    .text = text_,                                                       \
                    .example = example_},
#define DPM_LOCAL(id, name_, summary_, usage_, text_, example_)                          \
  [DPM_CMD_##id] = {.name = name_,                                                       \
                    .summary = summary_,                                                 \
                    .usage = usage_,                                                     \
                    .text = text_,                                                       \
                    .example = example_},
#include "common/commands.def"
#undef DPM_REQUEST
#undef DPM_LOCAL
};

const dpm_command *dpm_command_of_request(int request) {
  for (int i = 0; request && i < DPM_CMD_COUNT; i++)
    if (dpm_commands[i].request == request) return &dpm_commands[i];
  return NULL;
}
