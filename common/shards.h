/* Shard lists: WebDataset's brace ranges, `train-{000000..000146}.tar`,
 * expanded into the file names they stand for.
 *
 * A pattern holds at most one range {A..B} of decimal digits with A <= B;
 * each name writes the number zero-padded to A's width (so {000..146}
 * gives 000, 001, ..., 146). A pattern without braces is one name.
 *
 * Ownership: *out is a malloc'd array of malloc'd strings (free each, then
 * the array). Threads: pure. Errors: DPM_INVALID for an unbalanced or
 * malformed range, B < A, or more than max names; DPM_NOMEM. Messages quote
 * the pattern (escaped: it is a spec's or a client's text). */
#ifndef DPM_COMMON_SHARDS_H
#define DPM_COMMON_SHARDS_H

#include <stddef.h>

#include "dpm/status.h"

dpm_status dpm_shards_expand(const char *pattern, size_t max, char ***out, size_t *n,
                             dpm_err *err);

#endif
