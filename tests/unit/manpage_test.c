/* Man pages (common/manpage.h): roff markup in plain text is escaped, so
 * that a page shows the text and groff reads no request from it. */
#include <stdio.h>
#include <stdlib.h>

#include "common/manpage.h"
#include "test.h"

/* What fn writes, as a new string. */
static char *written(void (*fn)(FILE *f, const char *text), const char *text) {
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  if (!f) return NULL;
  fn(f, text);
  fclose(f);
  return buf;
}

TEST(manpage_escapes_roff) {
  char *s =
      written(dpm_man_text, "--iters N\n.SH not a request\n'quote\nback\\slash\n\nnext");
  CHECK(s);
  CHECK(!strcmp(
      s, "\\-\\-iters N\n\\&.SH not a request\n\\&'quote\nback\\eslash\n.PP\nnext\n"));
  free(s);
  s = written(dpm_man_para, "a-b");
  CHECK(s && !strcmp(s, ".PP\na\\-b\n"));
  free(s);
  char *buf = NULL;
  size_t n = 0;
  FILE *f = open_memstream(&buf, &n);
  CHECK(f);
  dpm_man_option(f, "--out", "FILE", "write it");
  dpm_man_begin(f, "dpmctl", "1", "0.5.0", "drive dpmd");
  fclose(f);
  CHECK_HAS(buf, ".TP\n\\fB\\-\\-out\\fR \\fIFILE\\fR\nwrite it\n");
  CHECK_HAS(buf,
            ".TH dpmctl 1 \"\" \"dpm 0.5.0\" \"dpm\"\n.SH NAME\ndpmctl \\- drive dpmd\n");
  free(buf);
}
