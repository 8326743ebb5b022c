/* Man pages (man(7) macros in roff), written by each program from its own
 * tables (`dpmctl --man`, `dpmd --man`, `dpm-train --man`), so that a page
 * cannot drift from the options it documents. The Makefile runs them into
 * build/man/ and `make install` installs the result.
 *
 * Text arguments are plain text: the writers escape what roff would read
 * as markup (backslashes, a leading '.' or '\'', and '-', written \- so that
 * options print and search as hyphens). Newlines in text start new lines
 * of output; a blank line starts a new paragraph. Write errors show in
 * ferror(f). Pure functions of their arguments: any thread. */
#ifndef DPM_COMMON_MANPAGE_H
#define DPM_COMMON_MANPAGE_H

#include <stdio.h>

/* .TH and the NAME section: "dpmctl \- summary". */
void dpm_man_begin(FILE *f, const char *name, const char *section, const char *version,
                   const char *summary);
/* .SH TITLE (upper case by convention: "SYNOPSIS"). */
void dpm_man_section(FILE *f, const char *title);
/* .SS title */
void dpm_man_subsection(FILE *f, const char *title);
/* A paragraph of plain text. */
void dpm_man_para(FILE *f, const char *text);
/* A tagged paragraph: the option in bold, its argument in italics (arg may
 * be NULL), then text. */
void dpm_man_option(FILE *f, const char *opt, const char *arg, const char *text);
/* Lines shown as they are (a command line, an example), in a no-fill block. */
void dpm_man_example(FILE *f, const char *lines);
/* Escaped text, no macro around it (after a macro the caller wrote). */
void dpm_man_text(FILE *f, const char *text);

#endif
