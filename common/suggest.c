/* The nearest name to a word (suggest.h): optimal string alignment
 * distance over letters folded to lower case. */
#include "common/suggest.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

static int fold(char c) { return tolower((unsigned char)c); }

static int min3(int a, int b, int c) { return a < b ? (a < c ? a : c) : (b < c ? b : c); }

/* Edit distance of a and b (each at most DPM_SUGGEST_MAX_LEN bytes). */
static int distance(const char *a, size_t na, const char *b, size_t nb) {
  int d[DPM_SUGGEST_MAX_LEN + 1][DPM_SUGGEST_MAX_LEN + 1];
  for (size_t i = 0; i <= na; i++) d[i][0] = (int)i;
  for (size_t j = 0; j <= nb; j++) d[0][j] = (int)j;
  for (size_t i = 1; i <= na; i++)
    for (size_t j = 1; j <= nb; j++) {
      int cost = fold(a[i - 1]) != fold(b[j - 1]);
      d[i][j] = min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
      if (i > 1 && j > 1 && fold(a[i - 1]) == fold(b[j - 2]) &&
          fold(a[i - 2]) == fold(b[j - 1]) && d[i - 2][j - 2] + 1 < d[i][j])
        d[i][j] = d[i - 2][j - 2] + 1;
    }
  return d[na][nb];
}

/* The most edits a word of n characters may be away from a suggestion. */
static int allowed(size_t n) { return n <= 4 ? 1 : n <= 8 ? 2 : 3; }

void dpm_suggest_init(dpm_suggest *s, const char *word) {
  s->word = word;
  s->best = NULL;
  s->best_d = 0;
}

void dpm_suggest_add(dpm_suggest *s, const char *candidate) {
  if (!s->word || !candidate || !strcmp(s->word, candidate)) return;
  size_t nw = strlen(s->word), nc = strlen(candidate);
  if (nw > DPM_SUGGEST_MAX_LEN || nc > DPM_SUGGEST_MAX_LEN) return;
  int d = distance(s->word, nw, candidate, nc);
  if (d > allowed(nw)) return;
  /* same but for case: distance 0, ahead of any real edit */
  if (!s->best || d < s->best_d) {
    s->best = candidate;
    s->best_d = d;
  }
}

const char *dpm_suggest_best(const dpm_suggest *s) { return s->best; }

const char *dpm_suggest_phrase(const dpm_suggest *s, char *buf, size_t cap) {
  if (!cap) return buf;
  if (s->best)
    snprintf(buf, cap, "; did you mean '%s'?", s->best);
  else
    buf[0] = 0;
  return buf;
}
