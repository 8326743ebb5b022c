/* Man pages in roff (manpage.h). */
#include "common/manpage.h"

#include <string.h>

/* One line of text, escaped; no newline. */
static void put_line(FILE *f, const char *s, size_t n) {
  if (n && (s[0] == '.' || s[0] == '\'')) fputs("\\&", f);
  for (size_t i = 0; i < n; i++) {
    if (s[i] == '\\')
      fputs("\\e", f);
    else if (s[i] == '-')
      fputs("\\-", f);
    else
      fputc(s[i], f);
  }
}

void dpm_man_text(FILE *f, const char *text) {
  const char *p = text ? text : "";
  for (;;) {
    size_t n = strcspn(p, "\n");
    if (n == 0 && *p == '\n') {
      fputs(".PP\n", f); /* a blank line: a new paragraph */
    } else {
      put_line(f, p, n);
      fputc('\n', f);
    }
    if (!p[n]) break;
    p += n + 1;
  }
}

void dpm_man_begin(FILE *f, const char *name, const char *section, const char *version,
                   const char *summary) {
  fputs(".TH ", f);
  put_line(f, name, strlen(name));
  fprintf(f, " %s \"\" \"dpm ", section);
  put_line(f, version, strlen(version));
  fputs("\" \"dpm\"\n", f);
  dpm_man_section(f, "NAME");
  put_line(f, name, strlen(name));
  fputs(" \\- ", f);
  dpm_man_text(f, summary);
}

void dpm_man_section(FILE *f, const char *title) {
  fputs(".SH ", f);
  put_line(f, title, strlen(title));
  fputc('\n', f);
}

void dpm_man_subsection(FILE *f, const char *title) {
  fputs(".SS ", f);
  put_line(f, title, strlen(title));
  fputc('\n', f);
}

void dpm_man_para(FILE *f, const char *text) {
  fputs(".PP\n", f);
  dpm_man_text(f, text);
}

void dpm_man_option(FILE *f, const char *opt, const char *arg, const char *text) {
  fputs(".TP\n\\fB", f);
  put_line(f, opt, strlen(opt));
  fputs("\\fR", f);
  if (arg) {
    fputs(" \\fI", f);
    put_line(f, arg, strlen(arg));
    fputs("\\fR", f);
  }
  fputc('\n', f);
  dpm_man_text(f, text);
}

void dpm_man_example(FILE *f, const char *lines) {
  fputs(".PP\n.RS 4\n.nf\n", f);
  dpm_man_text(f, lines);
  fputs(".fi\n.RE\n", f);
}
