/* dpmd's --help and its man page (dpmd.8, `dpmd --man`), written from the
 * config's key table (server/config.h: each flag, each config key) and
 * the few flags that are not config keys, so that neither can drift from
 * what dpmd accepts. Write errors show in ferror(f). Any thread. */
#ifndef DPMD_HELP_H
#define DPMD_HELP_H

#include <stdio.h>

/* "usage: dpmd [--config FILE] [--listen ADDR]... ...", one line per
 * flag group, wrapped. */
void dpmd_usage(FILE *f);
/* The usage, then each flag with its help. */
void dpmd_help(FILE *f);
/* dpmd.8 in roff: synopsis, flags, the config file's keys, signals, files,
 * exit status. */
void dpmd_man(FILE *f);

#endif
