/* "Did you mean ...": the nearest of a set of names to a word that named
 * none of them, for errors about unknown ops, spec keys, op arguments and
 * commands. A name that differs only in case always wins; otherwise the
 * name at the smallest edit distance (insertions, deletions,
 * substitutions and swaps of two neighbours, letters compared without
 * case), if it is close enough: at most 1 edit for words of up to 4
 * characters, 2 up to 8, 3 beyond. Pure functions over the caller's
 * struct: any thread.
 *
 *   dpm_suggest s;
 *   dpm_suggest_init(&s, "ReLU");
 *   for (each name) dpm_suggest_add(&s, name);
 *   if (dpm_suggest_best(&s)) ... "did you mean Relu"
 */
#ifndef DPM_COMMON_SUGGEST_H
#define DPM_COMMON_SUGGEST_H

#include <stddef.h>

#define DPM_SUGGEST_MAX_LEN 64 /* longer words and names are never matched */

typedef struct dpm_suggest {
  const char *word; /* what was written; borrowed */
  const char *best; /* the nearest candidate so far; borrowed; NULL: none */
  int best_d;       /* its distance (0: same but for case) */
} dpm_suggest;

void dpm_suggest_init(dpm_suggest *s, const char *word);
/* Considers one candidate (borrowed: it must outlive the dpm_suggest). A
 * candidate equal to the word is ignored: the caller found none. */
void dpm_suggest_add(dpm_suggest *s, const char *candidate);
/* The nearest candidate close enough to the word, or NULL. */
const char *dpm_suggest_best(const dpm_suggest *s);
/* "; did you mean 'Relu'?" into buf for the nearest candidate, or "" when
 * there is none close enough; returns buf. */
const char *dpm_suggest_phrase(const dpm_suggest *s, char *buf, size_t cap);

#endif
