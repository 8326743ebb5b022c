/* dpmctl: the command-line client of dpmd.
 *
 *   dpmctl [--endpoint ADDR] [--timeout MS] [--json] [--token-file FILE] COMMAND ...
 *   dpmctl --version | --man | --completion bash
 *
 * `dpmctl help` (or --help) lists the commands (the table in verbs.c),
 * `dpmctl help VERB` (or VERB --help) says all about one (doc.c);
 * --version (anywhere) prints dpmctl's version and protocol and exits 0;
 * --man prints the man page and --completion bash the bash completion.
 * Endpoint: --endpoint, else $DPM_ENDPOINT, else DPM_DEFAULT_ENDPOINT.
 * Timeout: --timeout MS (default 10000; -1 waits forever). Token: the
 * contents of --token-file or $DPM_TOKEN_FILE, trailing whitespace removed,
 * sent with every request. Exit codes: dpmctl.h. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "dpmctl/dpmctl.h"

#define TOKEN_MAX_BYTES 65536

/* Reads the token file into a new string, trailing whitespace removed. */
static char *read_token(const char *path, char *why, size_t cap) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    snprintf(why, cap, "cannot read token file %s: %s", path, strerror(errno));
    return NULL;
  }
  char *buf = malloc(TOKEN_MAX_BYTES + 1);
  size_t n = buf ? fread(buf, 1, TOKEN_MAX_BYTES + 1, f) : 0;
  int bad = !buf || ferror(f) || n > TOKEN_MAX_BYTES;
  fclose(f);
  if (bad) {
    snprintf(why, cap, "cannot read token file %s: %s", path,
             !buf                  ? "out of memory"
             : n > TOKEN_MAX_BYTES ? "too large"
                                   : "read error");
    free(buf);
    return NULL;
  }
  while (n > 0 && strchr(" \t\r\n\f\v", buf[n - 1])) n--;
  buf[n] = 0;
  if (memchr(buf, 0, n)) {
    snprintf(why, cap, "token file %s holds a NUL byte", path);
    free(buf);
    return NULL;
  }
  return buf;
}

int main(int argc, char **argv) {
  ctl_args a;
  ctl_ctx ctx;
  memset(&ctx, 0, sizeof ctx);
  ctx.a = &a;
  for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
    if (!strcmp(argv[i], "--json")) ctx.json = 1; /* for errors found while parsing */

  char msg[512];
  if (ctl_parse(ctl_verbs, ctl_n_verbs, argc, argv, &a, msg, sizeof msg)) {
    ctl_error(&ctx, "USAGE", "%s", msg);
    ctl_usage_short(stderr, a.verb);
    return CTL_USAGE;
  }
  ctx.json = a.opt[O_JSON] != NULL;
  if (a.opt[O_VERSION]) return ctl_print_version(&ctx);
  if (a.opt[O_HELP]) {
    ctl_usage(stdout, a.verb);
    return CTL_OK;
  }
  if (a.opt[O_MAN]) {
    ctl_print_man(stdout);
    return CTL_OK;
  }
  if (a.opt[O_COMPLETION] && ctl_print_completion(stdout, a.opt[O_COMPLETION])) {
    ctl_error(&ctx, "USAGE", "--completion takes bash");
    return CTL_USAGE;
  }
  if (a.opt[O_COMPLETION]) return CTL_OK;

  ctx.timeout_ms = CTL_DEFAULT_TIMEOUT_MS;
  if (a.opt[O_TIMEOUT]) {
    if (ctl_parse_int(a.opt[O_TIMEOUT], -1, INT_MAX, &ctx.timeout_ms)) {
      ctl_error(&ctx, "USAGE", "--timeout takes milliseconds (-1: wait forever)");
      ctl_usage_short(stderr, a.verb);
      return CTL_USAGE;
    }
    ctx.timeout_given = 1;
  }
  const char *env = getenv("DPM_ENDPOINT");
  ctx.endpoint = a.opt[O_ENDPOINT] ? a.opt[O_ENDPOINT]
                 : env && *env     ? env
                                   : DPM_DEFAULT_ENDPOINT;

  int rc;
  if (!a.verb->cmd->request) { /* a verb that sends no request */
    rc = a.verb->run(&ctx);
  } else {
    char *token = NULL;
    const char *tf = a.opt[O_TOKEN_FILE];
    if (!tf) {
      const char *e = getenv("DPM_TOKEN_FILE");
      tf = e && *e ? e : NULL;
    }
    if (tf && !(token = read_token(tf, msg, sizeof msg))) {
      ctl_error(&ctx, "IO", "%s", msg);
      return CTL_FAILED;
    }
    dpm_err err = {0};
    dpm_status s = dpm_client_open(ctx.endpoint, ctx.timeout_ms, &ctx.client, &err);
    if (!s && token) s = dpm_client_set_token(ctx.client, token, &err);
    free(token);
    if (s) {
      ctl_error(&ctx, dpm_status_name(s), "%s", err.msg);
      dpm_client_close(ctx.client);
      return ctl_transport_exit(s);
    }
    rc = a.verb->run(&ctx);
    dpm_client_close(ctx.client);
  }
  if (fflush(stdout) || ferror(stdout)) {
    fprintf(stderr, "dpmctl: IO: cannot write the output: %s\n", strerror(errno));
    if (!rc) rc = CTL_FAILED;
  }
  return rc;
}
