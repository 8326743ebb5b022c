/* Client side without a daemon: the JSON writer (escaping, invalid UTF-8,
 * non-finite and round-tripping numbers, misuse), dpmctl's command-line
 * parser (the verb-table rules, numbers, lists, --version,
 * --checkpoint-every, the schedule options of submit and set, sizes in
 * bytes), its output of the scheduler's fields (queue's table, status and
 * list, JSON), the progress bar's ETA (wall-clock rate, made-up times), and
 * the client library against servers in threads of this test:
 * a REP server (request fields, token, reply matching by id, garbage
 * replies), raw REP servers as dpmd has (answers to earlier calls skipped;
 * liveness pings and the "stopped answering" failure of a silent server; a
 * restart told by another instance in a ping answer; a server that closes
 * and binds again never gets the request a second time), a PUB socket
 * (events filtered by model, garbage skipped); a bad endpoint, and an ipc
 * socket file that is missing or has no listener, are DPM_IO at once. */
#include <nanomsg/nn.h>
#include <nanomsg/pubsub.h>
#include <nanomsg/reqrep.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "dpm/client.h"
#include "lib/json.h"
#include "test.h"

/* dpmctl's parser, ETA and output have no daemon dependencies: test them
 * in place. */
#include "dpmctl/args.c"
#include "dpmctl/output.c"
#include "dpmctl/rate.c"

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

/* ---- JSON writer ---- */

TEST(json_escapes_strings) {
  dpm_json j;
  dpm_json_init(&j);
  dpm_json_object(&j, NULL);
  dpm_json_str(&j, "q", "a\"b\\c/d");
  dpm_json_str(&j, "ctl", "\n\r\t\b\f\x01\x1f");
  dpm_json_str(&j, "utf8", "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
  dpm_json_str(&j, "bad",
               "x\xff"
               "y\xc3");                                /* stray, truncated */
  dpm_json_str(&j, "overlong", "\xc0\x80\xed\xa0\x80"); /* overlong NUL, surrogate */
  dpm_json_strn(&j, "nul", "a\0b", 3);
  dpm_json_str(&j, "k\"ey", NULL);
  dpm_json_end(&j);
  const char *t = dpm_json_text(&j);
  CHECK(t != NULL);
  CHECK(!strcmp(t, "{\"q\":\"a\\\"b\\\\c/d\","
                   "\"ctl\":\"\\n\\r\\t\\b\\f\\u0001\\u001f\","
                   "\"utf8\":\"caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80\","
                   "\"bad\":\"x\\ufffdy\\ufffd\","
                   "\"overlong\":\"\\ufffd\\ufffd\\ufffd\\ufffd\\ufffd\","
                   "\"nul\":\"a\\u0000b\","
                   "\"k\\\"ey\":null}"));
  dpm_json_fini(&j);
}

TEST(json_numbers) {
  dpm_json j;
  dpm_json_init(&j);
  dpm_json_array(&j, NULL);
  dpm_json_num(&j, NULL, NAN);
  dpm_json_num(&j, NULL, INFINITY);
  dpm_json_num(&j, NULL, -INFINITY);
  dpm_json_num(&j, NULL, 0.1);
  dpm_json_num(&j, NULL, 0.4123);
  dpm_json_num(&j, NULL, 1.0 / 3.0);
  dpm_json_num(&j, NULL, 1e300);
  dpm_json_num(&j, NULL, 42);
  dpm_json_float(&j, NULL, 0.1f);
  dpm_json_float(&j, NULL, NAN);
  dpm_json_int(&j, NULL, -9223372036854775807ll - 1);
  dpm_json_uint(&j, NULL, UINT64_MAX);
  dpm_json_bool(&j, NULL, 1);
  dpm_json_bool(&j, NULL, 0);
  dpm_json_null(&j, NULL);
  dpm_json_end(&j);
  const char *t = dpm_json_text(&j);
  CHECK(t != NULL);
  CHECK_HAS(t, "[null,null,null,0.1,0.4123,0.3333333333333333,1e+300,42,0.1,null,");
  CHECK_HAS(t, ",-9223372036854775808,18446744073709551615,true,false,null]");
  /* every double reads back exactly */
  double v[] = {1.0 / 3.0, 2.0 / 3.0, 1e-310, 123456789.123456789, -0.000123};
  for (size_t i = 0; i < sizeof v / sizeof *v; i++) {
    dpm_json_reset(&j);
    dpm_json_num(&j, NULL, v[i]);
    CHECK(dpm_json_text(&j) != NULL);
    CHECK(strtod(dpm_json_text(&j), NULL) == v[i]);
  }
  dpm_json_fini(&j);
}

TEST(json_nesting_and_misuse) {
  dpm_json j;
  dpm_json_init(&j);
  CHECK(!strcmp(dpm_json_text(&j), ""));
  dpm_json_object(&j, NULL);
  dpm_json_array(&j, "a");
  dpm_json_object(&j, NULL);
  dpm_json_end(&j);
  dpm_json_object(&j, NULL);
  dpm_json_int(&j, "x", 1);
  dpm_json_end(&j);
  dpm_json_end(&j);
  dpm_json_object(&j, "o");
  dpm_json_end(&j);
  dpm_json_array(&j, "e");
  dpm_json_end(&j);
  dpm_json_end(&j);
  CHECK(!strcmp(dpm_json_text(&j), "{\"a\":[{},{\"x\":1}],\"o\":{},\"e\":[]}"));

  dpm_json_reset(&j); /* one end too many */
  dpm_json_object(&j, NULL);
  dpm_json_end(&j);
  dpm_json_end(&j);
  CHECK(dpm_json_text(&j) == NULL);

  dpm_json_reset(&j); /* two top-level values */
  dpm_json_int(&j, NULL, 1);
  dpm_json_int(&j, NULL, 2);
  CHECK(dpm_json_text(&j) == NULL);

  dpm_json_reset(&j); /* too deep, then still safe */
  for (int i = 0; i < DPM_JSON_MAX_DEPTH + 3; i++) dpm_json_array(&j, NULL);
  for (int i = 0; i < DPM_JSON_MAX_DEPTH + 3; i++) dpm_json_end(&j);
  CHECK(dpm_json_text(&j) == NULL);

  dpm_json_reset(&j); /* a long string grows the buffer */
  char big[5000];
  memset(big, 'z', sizeof big - 1);
  big[sizeof big - 1] = 0;
  dpm_json_str(&j, NULL, big);
  CHECK(dpm_json_text(&j) != NULL);
  CHECK_INT(strlen(dpm_json_text(&j)), sizeof big + 1);
  dpm_json_fini(&j);
  dpm_json_fini(&j); /* twice is fine */
}

/* ---- dpmctl's parser ---- */

static int dummy(struct ctl_ctx *ctx) {
  (void)ctx;
  return 0;
}

static const ctl_verb VERBS[] = {
    {&dpm_commands[DPM_CMD_PING], 0, 0, 0, 0, dummy, NULL},
    {&dpm_commands[DPM_CMD_STATUS], 0, 1, 0, 0, dummy, NULL},
    {&dpm_commands[DPM_CMD_TRAIN], 1, 1, OPT(O_ITERS) | OPT(O_WAIT), OPT(O_ITERS), dummy,
     NULL},
    {&dpm_commands[DPM_CMD_LOAD], 2, 2, 0, 0, dummy, NULL},
    /* as verbs.c has them */
    {&dpm_commands[DPM_CMD_SUBMIT], 1, 1,
     OPT(O_NAME) | OPT(O_PRIORITY) | OPT(O_WEIGHT) | OPT(O_PREEMPT) | OPT(O_MAX_MEMORY) |
         OPT(O_NO_QUEUE),
     0, dummy, NULL},
    {&dpm_commands[DPM_CMD_SET], 1, 1, OPT(O_PRIORITY) | OPT(O_WEIGHT) | OPT(O_PREEMPT),
     0, dummy, NULL},
    {&dpm_commands[DPM_CMD_QUEUE], 0, 0, 0, 0, dummy, NULL},
};
#define NV ((int)(sizeof VERBS / sizeof *VERBS))

static int parse(ctl_args *a, char *msg, ...) {
  char *argv[16] = {"dpmctl"};
  int argc = 1;
  va_list ap;
  va_start(ap, msg);
  for (char *s; argc < 16 && (s = va_arg(ap, char *));) argv[argc++] = s;
  va_end(ap);
  return ctl_parse(VERBS, NV, argc, argv, a, msg, 256);
}

TEST(ctl_parse_verb_table_rules) {
  ctl_args a;
  char msg[256];
  CHECK_INT(parse(&a, msg, "ping", NULL), CTL_OK);
  CHECK(a.verb == &VERBS[0]);
  CHECK_INT(parse(&a, msg, "--json", "--timeout", "-1", "--endpoint=ipc:///x", "status",
                  "m", NULL),
            CTL_OK);
  CHECK(a.opt[O_JSON] && !strcmp(a.opt[O_TIMEOUT], "-1"));
  CHECK(!strcmp(a.opt[O_ENDPOINT], "ipc:///x") && a.npos == 1 && !strcmp(a.pos[0], "m"));
  /* options after the positional arguments, globals too, --opt=value */
  CHECK_INT(parse(&a, msg, "train", "m", "--wait", "--iters=5", "--json", NULL), CTL_OK);
  CHECK(!strcmp(a.opt[O_ITERS], "5") && a.opt[O_WAIT] && a.opt[O_JSON]);
  CHECK_INT(parse(&a, msg, "train", "--iters", "5", "--", "--odd-name", NULL), CTL_OK);
  CHECK(!strcmp(a.pos[0], "--odd-name"));

  CHECK_INT(parse(&a, msg, NULL), CTL_USAGE);
  CHECK_HAS(msg, "no command");
  CHECK_INT(parse(&a, msg, "bogus", NULL), CTL_USAGE);
  CHECK_HAS(msg, "unknown command 'bogus'");
  CHECK(a.verb == NULL);
  CHECK_INT(parse(&a, msg, "ping", "extra", NULL), CTL_USAGE);
  CHECK_HAS(msg, "unexpected argument 'extra'");
  CHECK(a.verb == &VERBS[0]);
  CHECK_INT(parse(&a, msg, "load", "m", NULL), CTL_USAGE);
  CHECK_HAS(msg, "needs more arguments");
  CHECK_INT(parse(&a, msg, "train", "m", NULL), CTL_USAGE);
  CHECK_HAS(msg, "train needs --iters");
  CHECK_INT(parse(&a, msg, "train", "m", "--iters", NULL), CTL_USAGE);
  CHECK_HAS(msg, "--iters needs a value");
  CHECK_INT(parse(&a, msg, "train", "m", "--iters", "3", "--wait=1", NULL), CTL_USAGE);
  CHECK_HAS(msg, "--wait takes no value");
  CHECK_INT(parse(&a, msg, "status", "--iters", "3", NULL), CTL_USAGE);
  CHECK_HAS(msg, "status does not take --iters");
  CHECK_INT(parse(&a, msg, "--iters", "3", "train", "m", NULL), CTL_USAGE);
  CHECK_HAS(msg, "--iters comes after the command");
  CHECK_INT(parse(&a, msg, "ping", "--bogus", NULL), CTL_USAGE);
  CHECK_HAS(msg, "unknown option '--bogus'");
  /* the nearest command or option that would do */
  CHECK_INT(parse(&a, msg, "staus", NULL), CTL_USAGE);
  CHECK_HAS(msg, "unknown command 'staus'; did you mean 'status'?");
  CHECK_INT(parse(&a, msg, "train", "m", "--iter=5", NULL), CTL_USAGE);
  CHECK_HAS(msg, "unknown option '--iter=5'; did you mean '--iters'?");
  CHECK_INT(parse(&a, msg, "ping", "--iter=5", NULL), CTL_USAGE); /* not ping's */
  CHECK(!strstr(msg, "did you mean"));
  /* help: with or without a command, missing arguments do not matter */
  CHECK_INT(parse(&a, msg, "--help", NULL), CTL_OK);
  CHECK(a.opt[O_HELP] && !a.verb);
  CHECK_INT(parse(&a, msg, "train", "-h", NULL), CTL_OK);
  CHECK(a.opt[O_HELP] && a.verb == &VERBS[2]);
  /* --version: alone, or anywhere with a command whose arguments are missing */
  CHECK_INT(parse(&a, msg, "--version", NULL), CTL_OK);
  CHECK(a.opt[O_VERSION] && !a.verb);
  CHECK_INT(parse(&a, msg, "--json", "--version", NULL), CTL_OK);
  CHECK(a.opt[O_VERSION] && a.opt[O_JSON]);
  CHECK_INT(parse(&a, msg, "train", "--version", NULL), CTL_OK);
  CHECK(a.opt[O_VERSION]);
  CHECK_INT(parse(&a, msg, "--version=1", NULL), CTL_USAGE);
  CHECK_HAS(msg, "--version takes no value");
}

TEST(ctl_checkpoint_every) {
  uint64_t it = 7;
  double sec = 7;
  CHECK_INT(ctl_parse_checkpoint_every("1000", &it, &sec), 0);
  CHECK(it == 1000 && sec == 0);
  CHECK_INT(ctl_parse_checkpoint_every("600s", &it, &sec), 0);
  CHECK(it == 0 && sec == 600);
  CHECK_INT(ctl_parse_checkpoint_every("0", &it, &sec), 0);
  CHECK(it == 0 && sec == 0);
  CHECK_INT(ctl_parse_checkpoint_every("0s", &it, &sec), 0);
  CHECK(it == 0 && sec == 0);
  const char *bad[] = {"",
                       "s",
                       "-1",
                       "1.5",
                       "10m",
                       "10ss",
                       "s10",
                       " 5",
                       "5 s",
                       "1e3",
                       "99999999999999999999s",
                       "1099511627777"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    it = 7;
    sec = 7;
    if (ctl_parse_checkpoint_every(bad[k], &it, &sec) != -1) {
      dpm_test_fail(__FILE__, __LINE__, "'%s' accepted", bad[k]);
      return;
    }
    CHECK(it == 7 && sec == 7); /* untouched */
  }
  CHECK_INT(ctl_parse_checkpoint_every(NULL, &it, &sec), -1);
}

/* ---- the progress bar's ETA ---- */

TEST(ctl_eta_follows_the_wall_clock) {
  /* the daemon's step_ms would say 10 ms a step (left * 10 ms); the steps
   * really come every 50 ms: 20 per second, in progress events of 10 */
  ctl_rate r;
  memset(&r, 0, sizeof r);
  const uint64_t target = 1000;
  double eta = 0;
  CHECK(ctl_rate_eta(&r, 100.0, 0, target) < 0); /* one sample: unknown */
  for (uint64_t it = 10; it <= 400; it += 10)
    eta = ctl_rate_eta(&r, 100.0 + it * 0.05, it, target);
  CHECK_NEAR(eta, (double)(target - 400) * 0.05, 0.01); /* 30 s, not 6 */
  /* the same iteration again, later: slower, and the ETA grows */
  double later = ctl_rate_eta(&r, 100.0 + 400 * 0.05 + 5, 400, target);
  CHECK_NEAR(later, 600.0 * 25.0 / 400.0, 0.01);

  /* a rate that changes: 40 s at 20 steps/s, then 40 s at 100 steps/s; the
   * window (the last CTL_RATE_SAMPLES s) sees the new rate only */
  memset(&r, 0, sizeof r);
  uint64_t it = 0;
  double t = 0;
  for (; t < 40; t += 0.5, it += 10) ctl_rate_eta(&r, t, it, 1000000);
  for (; t < 80; t += 0.5, it += 50) eta = ctl_rate_eta(&r, t, it, 1000000);
  it -= 50;
  CHECK_NEAR(eta, (double)(1000000 - it) / 100.0, (double)(1000000 - it) / 100.0 * 0.01);

  /* iterations that go back (a checkpoint was loaded): starts over */
  CHECK(ctl_rate_eta(&r, 81, 5, 1000) < 0);
  CHECK(ctl_rate_eta(&r, 81.5, 5, 1000) < 0); /* no step seen since */
  CHECK_NEAR(ctl_rate_eta(&r, 83, 45, 1000), 955.0 * 2 / 40, 1e-9);
  /* at the target: no time left */
  CHECK_NEAR(ctl_rate_eta(&r, 84, 1000, 1000), 0, 0);
}

TEST(ctl_numbers_and_lists) {
  uint64_t u = 0;
  int i = 0;
  CHECK_INT(ctl_parse_u64("500", UINT64_MAX, &u), 0);
  CHECK_INT(u, 500);
  CHECK_INT(ctl_parse_u64("18446744073709551615", UINT64_MAX, &u), 0);
  CHECK(u == UINT64_MAX);
  const char *bad[] = {"", "x", "12x", " 1", "+1", "-1", "1e3", "18446744073709551616"};
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++)
    CHECK_INT(ctl_parse_u64(bad[k], UINT64_MAX, &u), -1);
  CHECK_INT(ctl_parse_u64("11", 10, &u), -1);
  CHECK_INT(ctl_parse_u64(NULL, 10, &u), -1);
  CHECK_INT(ctl_parse_int("-1", -1, 100, &i), 0);
  CHECK_INT(i, -1);
  CHECK_INT(ctl_parse_int("-2", -1, 100, &i), -1);
  CHECK_INT(ctl_parse_int("2147483648", -1, 2147483647, &i), -1);
  CHECK_INT(ctl_parse_int("--1", -1, 100, &i), -1);

  char **v;
  size_t n;
  CHECK_INT(ctl_split("cpu:0,cpu:1", &v, &n), 0);
  CHECK(n == 2 && !strcmp(v[0], "cpu:0") && !strcmp(v[1], "cpu:1"));
  ctl_free_list(v, n);
  CHECK_INT(ctl_split("data", &v, &n), 0);
  CHECK(n == 1 && !strcmp(v[0], "data"));
  ctl_free_list(v, n);
  const char *badlists[] = {"", ",", "a,", ",a", "a,,b"};
  for (size_t k = 0; k < sizeof badlists / sizeof *badlists; k++) {
    CHECK_INT(ctl_split(badlists[k], &v, &n), -1);
    CHECK(v == NULL && n == 0);
  }
}

/* submit's and set's schedule options: each parsed into its field with
 * has_ set, only those given; bad values refused naming the option. */
TEST(ctl_schedule_options) {
  ctl_args a;
  char msg[256];
  CHECK_INT(parse(&a, msg, "submit", "s.yaml", "--priority", "-7", "--weight=0.5",
                  "--preempt", "spill", "--max-memory", "512Mi", "--no-queue", NULL),
            CTL_OK);
  CHECK(a.opt[O_NO_QUEUE] && !strcmp(a.opt[O_NO_QUEUE], ""));
  Dpm__Schedule s = DPM__SCHEDULE__INIT;
  CHECK_INT(ctl_parse_schedule(&a, 0, &s, msg, sizeof msg), 4);
  CHECK(s.has_priority && s.priority == -7);
  CHECK(s.has_weight && s.weight == 0.5);
  CHECK(s.has_preempt && s.preempt == DPM__PREEMPT_POLICY__PREEMPT_SPILL);
  CHECK(s.has_max_memory && s.max_memory == 512ull << 20);
  /* one given: only its field */
  CHECK_INT(parse(&a, msg, "submit", "s.yaml", "--weight", "3", NULL), CTL_OK);
  Dpm__Schedule one = DPM__SCHEDULE__INIT;
  CHECK_INT(ctl_parse_schedule(&a, 0, &one, msg, sizeof msg), 1);
  CHECK(one.has_weight && one.weight == 3);
  CHECK(!one.has_priority && !one.has_preempt && !one.has_max_memory);
  CHECK(!a.opt[O_NO_QUEUE]);
  /* none: nothing to send (submit), a usage error (set) */
  CHECK_INT(parse(&a, msg, "submit", "s.yaml", NULL), CTL_OK);
  CHECK_INT(ctl_parse_schedule(&a, 0, &one, msg, sizeof msg), 0);
  CHECK_INT(parse(&a, msg, "set", "m", NULL), CTL_OK);
  CHECK_INT(ctl_parse_schedule(&a, 1, &one, msg, sizeof msg), -1);
  CHECK_HAS(msg, "set needs --priority, --weight or --preempt");
  CHECK_INT(parse(&a, msg, "set", "m", "--preempt", "keep", NULL), CTL_OK);
  Dpm__Schedule set = DPM__SCHEDULE__INIT;
  CHECK_INT(ctl_parse_schedule(&a, 1, &set, msg, sizeof msg), 1);
  CHECK(set.has_preempt && set.preempt == DPM__PREEMPT_POLICY__PREEMPT_KEEP);
  /* set changes no memory bound; queue takes nothing */
  CHECK_INT(parse(&a, msg, "set", "m", "--max-memory", "1", NULL), CTL_USAGE);
  CHECK_HAS(msg, "set does not take --max-memory");
  CHECK_INT(parse(&a, msg, "set", "--priority", "1", NULL), CTL_USAGE);
  CHECK_HAS(msg, "set needs more arguments");
  CHECK_INT(parse(&a, msg, "queue", NULL), CTL_OK);
  CHECK_INT(parse(&a, msg, "queue", "m", NULL), CTL_USAGE);
  CHECK_HAS(msg, "unexpected argument 'm' for queue");
  CHECK_INT(parse(&a, msg, "queue", "--weight", "1", NULL), CTL_USAGE);
  CHECK_HAS(msg, "queue does not take --weight");

  static const struct {
    const char *opt, *value, *says;
  } bad[] = {
      {"--weight", "0", "--weight takes a number above 0 up to 1000 (0.5, 3), not '0'"},
      {"--weight", "-1", "--weight takes a number above 0"},
      {"--weight", "abc", "not 'abc'"},
      {"--weight", "1000.5", "--weight takes"},
      {"--weight", "1e3", "--weight takes"},
      {"--weight", "nan", "--weight takes"},
      {"--weight", "", "--weight takes"},
      {"--preempt", "foo", "--preempt takes keep or spill, not 'foo'"},
      {"--preempt", "KEEP", "--preempt takes keep or spill"},
      {"--priority", "99999", "--priority takes a whole number from -1000 to 1000"},
      {"--priority", "-1001", "--priority takes"},
      {"--priority", "1.5", "--priority takes"},
      {"--max-memory", "0", "--max-memory takes a positive number of bytes"},
      {"--max-memory", "12X", "--max-memory takes"},
      {"--max-memory", "-5", "--max-memory takes"},
      {"--max-memory", "20000000000Gi", "--max-memory takes"},
  };
  for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
    char *argv[] = {"dpmctl", "submit", "s.yaml", (char *)bad[k].opt,
                    (char *)bad[k].value};
    CHECK_INT(ctl_parse(VERBS, NV, 5, argv, &a, msg, sizeof msg), CTL_OK);
    Dpm__Schedule b = DPM__SCHEDULE__INIT;
    msg[0] = 0;
    if (ctl_parse_schedule(&a, 0, &b, msg, sizeof msg) != -1 || !strstr(msg, bad[k].says))
      dpm_test_fail(__FILE__, __LINE__, "%s %s: '%s'", bad[k].opt, bad[k].value, msg);
  }
}

TEST(ctl_bytes_numbers_and_policies) {
  static const struct {
    const char *s;
    uint64_t v;
  } good[] = {{"1", 1},
              {"4096", 4096},
              {"2K", 2000},
              {"3M", 3000000},
              {"4G", 4000000000ull},
              {"1T", 1000000000000ull},
              {"1Ki", 1024},
              {"512Mi", 512ull << 20},
              {"2Gi", 2ull << 30},
              {"1Ti", 1ull << 40},
              {"18446744073709551615", UINT64_MAX},
              {"16777215Ti", 16777215ull << 40}};
  for (size_t k = 0; k < sizeof good / sizeof *good; k++) {
    uint64_t v = 0;
    if (ctl_parse_bytes(good[k].s, &v) || v != good[k].v)
      dpm_test_fail(__FILE__, __LINE__, "'%s' -> %llu", good[k].s, (unsigned long long)v);
  }
  const char *bad[] = {"",   "K",  "1k",   "1KB",        "1 Ki",
                       " 1", "+1", "1.5G", "16777216Ti", "18446744073709551616",
                       NULL};
  for (size_t k = 0; bad[k]; k++) {
    uint64_t v = 7;
    if (ctl_parse_bytes(bad[k], &v) != -1 || v != 7)
      dpm_test_fail(__FILE__, __LINE__, "'%s' accepted", bad[k]);
  }
  CHECK_INT(ctl_parse_bytes(NULL, &(uint64_t){0}), -1);

  double d = 0;
  CHECK_INT(ctl_parse_number("0.5", 0, 1, 1000, &d), 0);
  CHECK(d == 0.5);
  CHECK_INT(ctl_parse_number(".25", 0, 1, 1000, &d), 0);
  CHECK(d == 0.25);
  CHECK_INT(ctl_parse_number("1000", 0, 1, 1000, &d), 0);
  CHECK_INT(ctl_parse_number("0", 0, 0, 1000, &d), 0); /* a closed minimum */
  const char *badnum[] = {"0",    "0.0", ".",  "1.", "-1",  "+1",      "1e3",
                          "0x10", "inf", " 1", "1 ", "1,5", "1000.01", NULL};
  for (size_t k = 0; badnum[k]; k++)
    if (ctl_parse_number(badnum[k], 0, 1, 1000, &d) != -1)
      dpm_test_fail(__FILE__, __LINE__, "'%s' accepted", badnum[k]);

  Dpm__PreemptPolicy p = DPM__PREEMPT_POLICY__PREEMPT_KEEP;
  CHECK_INT(ctl_parse_preempt("spill", &p), 0);
  CHECK_INT(p, DPM__PREEMPT_POLICY__PREEMPT_SPILL);
  CHECK_INT(ctl_parse_preempt("keep", &p), 0);
  CHECK_INT(p, DPM__PREEMPT_POLICY__PREEMPT_KEEP);
  CHECK_INT(ctl_parse_preempt("", &p), -1);
  CHECK_INT(ctl_parse_preempt(NULL, &p), -1);
  CHECK(!strcmp(ctl_preempt_word(DPM__PREEMPT_POLICY__PREEMPT_SPILL), "spill"));
  CHECK(ctl_preempt_word(7) == NULL && ctl_preempt_word(-1) == NULL);

  char b[32];
  static const struct {
    uint64_t v;
    const char *s;
  } sizes[] = {{0, "0 B"},
               {1023, "1023 B"},
               {1024, "1.00 KiB"},
               {314572800, "300 MiB"},
               {1300000000, "1.21 GiB"},
               {3ull << 30, "3.00 GiB"},
               {(10ull << 20) - 1, "10.0 MiB"},
               {(1000ull << 10) - 1, "1000 KiB"},
               {UINT64_MAX, "16.0 EiB"}};
  for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) {
    ctl_format_bytes(sizes[k].v, b, sizeof b);
    if (strcmp(b, sizes[k].s))
      dpm_test_fail(__FILE__, __LINE__, "%llu: '%s', not '%s'",
                    (unsigned long long)sizes[k].v, b, sizes[k].s);
  }
}

/* ---- dpmctl's output of the scheduler's fields ---- */

/* Two groups: big trains on cpu:0,cpu:1 and preempts small (spill); huge
 * waits first in the memory queue; cnn, alone on cpu:2, is ready. */
typedef struct {
  Dpm__Schedule sched[4];
  Dpm__ModelInfo m[4];
  Dpm__ModelInfo *list[4];
  char *devs[2], *dev2[1];
} queue_fixture;

static void queue_fixture_init(queue_fixture *q) {
  static const struct {
    const char *name, *state, *group, *waiting;
    int prio;
    double weight, share;
    int preempt;
    uint64_t max_memory, memory, iter, target, position;
  } rows[4] = {
      {"big", "training", "cpu:0,cpu:1", NULL, 10, 1, 0.93, 0, 0, 1300000000, 40, 100, 0},
      {"small", "preempted", "cpu:0,cpu:1", "preempted by big", 0, 0.5, 0.07, 1,
       3ull << 30, 314572800, 12, 100, 0},
      {"huge", "queued", "cpu:0,cpu:1",
       "queued: 3221225472 bytes do not fit beside big, small", 0, 1, 0, 0, 0, 3ull << 30,
       0, 0, 1},
      {"cnn", "ready", "cpu:2", NULL, 0, 2, 0, 0, 0, 851443712, 500, 500, 0},
  };
  memset(q, 0, sizeof *q);
  q->devs[0] = "cpu:0";
  q->devs[1] = "cpu:1";
  q->dev2[0] = "cpu:2";
  for (int i = 0; i < 4; i++) {
    Dpm__Schedule s = DPM__SCHEDULE__INIT;
    s.has_priority = s.has_weight = s.has_preempt = 1;
    s.priority = rows[i].prio;
    s.weight = rows[i].weight;
    s.preempt = (Dpm__PreemptPolicy)rows[i].preempt;
    s.has_max_memory = rows[i].max_memory > 0;
    s.max_memory = rows[i].max_memory;
    q->sched[i] = s;
    Dpm__ModelInfo m = DPM__MODEL_INFO__INIT;
    m.name = (char *)rows[i].name;
    m.state = (char *)rows[i].state;
    m.group = (char *)rows[i].group;
    m.waiting = (char *)rows[i].waiting;
    m.schedule = &q->sched[i];
    m.has_share = 1;
    m.share = rows[i].share;
    m.has_memory_bytes = 1;
    m.memory_bytes = rows[i].memory;
    m.has_iter = m.has_target_iter = rows[i].target > 0;
    m.iter = rows[i].iter;
    m.target_iter = rows[i].target;
    m.has_queue_position = 1;
    m.queue_position = (uint32_t)rows[i].position;
    m.n_devices = i < 3 ? 2 : 1;
    m.devices = i < 3 ? q->devs : q->dev2;
    q->m[i] = m;
    q->list[i] = &q->m[i];
  }
}

/* s is the string want (printed in full when not). */
#define CHECK_TEXT(s, want)                                                              \
  do {                                                                                   \
    const char *s_ = (s), *w_ = (want);                                                  \
    if (!s_ || strcmp(s_, w_)) {                                                         \
      dpm_test_fail(__FILE__, __LINE__, "%s =\n%s\nexpected\n%s", #s,                    \
                    s_ ? s_ : "(null)", w_);                                             \
      return;                                                                            \
    }                                                                                    \
  } while (0)

/* What the statements write to f, in a new string text. */
#define CAPTURE(text, ...)                                                               \
  do {                                                                                   \
    size_t len_;                                                                         \
    FILE *f = open_memstream(&(text), &len_);                                            \
    __VA_ARGS__;                                                                         \
    fclose(f);                                                                           \
  } while (0)

TEST(ctl_queue_output) {
  queue_fixture q;
  queue_fixture_init(&q);
  char *text = NULL;
  CAPTURE(text, ctl_queue_table(f, q.list, 4));
  CHECK_TEXT(
      text,
      "cpu:0,cpu:1\n"
      "  NAME   STATE      PRIORITY  WEIGHT  SHARE  MEMORY    ITER     NOTE\n"
      "  big    training   10        1       93%    1.21 GiB  40/100\n"
      "  small  preempted  0         0.5     7%     300 MiB   12/100   preempted by big\n"
      "  huge   queued #1  0         1       0%     3.00 GiB  -        "
      "queued: 3221225472 bytes do not fit beside big, small\n"
      "cpu:2\n"
      "  NAME   STATE      PRIORITY  WEIGHT  SHARE  MEMORY    ITER     NOTE\n"
      "  cnn    ready      0         2       0%     812 MiB   500/500\n");
  free(text);
  CAPTURE(text, ctl_queue_table(f, q.list, 0));
  CHECK_TEXT(text, "no models\n");
  free(text);
  /* no group from the daemon: the devices stand for it; no schedule: "-" */
  q.m[3].group = NULL;
  q.m[3].schedule = NULL;
  q.m[3].has_share = 0;
  CAPTURE(text, ctl_queue_table(f, &q.list[3], 1));
  CHECK_TEXT(text, "cpu:2\n"
                   "  NAME  STATE  PRIORITY  WEIGHT  SHARE  MEMORY   ITER     NOTE\n"
                   "  cnn   ready  -         -       -      812 MiB  500/500\n");
  free(text);

  /* --json: the list's form, each model with its schedule and place */
  dpm_json j;
  dpm_json_init(&j);
  ctl_json_model(&j, NULL, &q.m[1]);
  CHECK_TEXT(
      dpm_json_text(&j),
      "{\"name\":\"small\",\"state\":\"preempted\",\"waiting\":\"preempted by big\","
      "\"queue_position\":0,\"share\":0.07,\"group\":\"cpu:0,cpu:1\",\"iter\":12,"
      "\"target_iter\":100,\"devices\":[\"cpu:0\",\"cpu:1\"],"
      "\"memory_bytes\":314572800,\"schedule\":{\"priority\":0,\"weight\":0.5,"
      "\"preempt\":\"spill\",\"max_memory\":3221225472}}");
  dpm_json_reset(&j);
  ctl_json_model(&j, NULL, &q.m[2]);
  CHECK_TEXT(dpm_json_text(&j),
             "{\"name\":\"huge\",\"state\":\"queued\",\"waiting\":\"queued: 3221225472 "
             "bytes do not fit beside big, small\",\"queue_position\":1,\"share\":0,"
             "\"group\":\"cpu:0,cpu:1\",\"devices\":[\"cpu:0\",\"cpu:1\"],"
             "\"memory_bytes\":3221225472,\"schedule\":{\"priority\":0,\"weight\":1,"
             "\"preempt\":\"keep\"}}");
  dpm_json_reset(&j);
  q.sched[0].preempt = (Dpm__PreemptPolicy)5; /* a newer daemon's policy: its number */
  ctl_json_model(&j, NULL, &q.m[0]);
  CHECK_HAS(dpm_json_text(&j), "\"preempt\":5}");
  dpm_json_fini(&j);
}

TEST(ctl_status_and_list_show_the_schedule) {
  queue_fixture q;
  queue_fixture_init(&q);
  char *text = NULL;
  CAPTURE(text, model_detail(f, &q.m[1]));
  CHECK_TEXT(text,
             "small  preempted (by big)  iter 12/100\n"
             "  devices cpu:0,cpu:1\n"
             "  priority 0  weight 0.5  preempt spill  max memory 3.00 GiB  share 7%\n");
  free(text);
  CAPTURE(text, model_detail(f, &q.m[2]));
  CHECK_TEXT(text, "huge  queued #1 (3221225472 bytes do not fit beside big, small)\n"
                   "  devices cpu:0,cpu:1\n"
                   "  priority 0  weight 1  preempt keep\n");
  free(text);
  /* a reason that does not repeat the state is kept whole */
  q.m[0].waiting = "waiting for its turn";
  CAPTURE(text, ctl_model_line(f, &q.m[0]));
  CHECK_TEXT(text, "big  training (waiting for its turn)  iter 40/100\n");
  free(text);
  /* a daemon that says nothing of the schedule: the lines as before */
  Dpm__ModelInfo plain = DPM__MODEL_INFO__INIT;
  plain.name = "mlp";
  plain.state = "ready";
  plain.has_iter = plain.has_target_iter = 1;
  plain.iter = plain.target_iter = 30;
  CAPTURE(text, model_detail(f, &plain));
  CHECK_TEXT(text, "mlp  ready  iter 30/30\n");
  free(text);
  /* list: the columns as before, why a model waits in NOTE */
  Dpm__ModelInfo *rows[] = {&q.m[1], &plain};
  CAPTURE(text, table(f, &list_spec, rows, 2, NULL));
  CHECK_TEXT(text, "NAME   STATE      ITER    LOSS  ACC  IMG/S  NOTE\n"
                   "small  preempted  12/100  -     -    -      preempted by big\n"
                   "mlp    ready      30/30   -     -    -\n");
  free(text);
}

/* ---- the client library ---- */

TEST(client_bad_endpoint_is_io) {
  dpm_client *c = (dpm_client *)1;
  dpm_err err = {0};
  CHECK_INT(dpm_client_open("no-transport", 100, &c, &err), DPM_IO);
  CHECK(c == NULL);
  CHECK_HAS(err.msg, "no-transport");
  CHECK_INT(dpm_client_open("", 100, &c, &err), DPM_IO);
  dpm_events *e = (dpm_events *)1;
  CHECK_INT(dpm_events_open("bogus://x", "m", &e, &err), DPM_IO);
  CHECK(e == NULL);
  dpm_client_close(NULL);
  dpm_events_close(NULL);
}

static Dpm__Request ping_request(Dpm__Empty *e) {
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_PING;
  rq.ping = e;
  return rq;
}

TEST(client_missing_ipc_socket_fails_at_once) {
  char path[96], ep[128];
  snprintf(path, sizeof path, "/tmp/dpm-client-test-%d.sock", (int)getpid());
  snprintf(ep, sizeof ep, "ipc://%s", path);
  unlink(path);
  Dpm__Empty e = DPM__EMPTY__INIT;
  Dpm__Request rq = ping_request(&e);
  dpm_client *c;
  dpm_err err = {0}, err2 = {0};
  CHECK_INT(dpm_client_open(ep, 10000, &c, &err), DPM_OK);
  int named = !strcmp(dpm_client_endpoint(c), ep);
  Dpm__Response *rs = (Dpm__Response *)1;
  double t0 = now_ms();
  dpm_status st = dpm_client_call(c, &rq, &rs, &err);
  double ms = now_ms() - t0;

  /* a socket file nobody listens on (a daemon killed with -9 leaves one) */
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
  int bound = fd >= 0 ? bind(fd, (struct sockaddr *)&sa, sizeof sa) : -1;
  if (fd >= 0) close(fd);
  Dpm__Response *rs2 = (Dpm__Response *)1;
  double t1 = now_ms();
  dpm_status st2 = dpm_client_call(c, &rq, &rs2, &err2);
  double ms2 = now_ms() - t1;
  unlink(path);
  dpm_client_close(c);

  CHECK(named);
  CHECK_INT(st, DPM_IO);
  CHECK(rs == NULL);
  CHECK(ms < 300);
  CHECK_HAS(err.msg, path);
  CHECK_HAS(err.msg, "No such file");
  CHECK_INT(bound, 0);
  CHECK_INT(st2, DPM_IO);
  CHECK(rs2 == NULL);
  CHECK(ms2 < 300);
  CHECK_HAS(err2.msg, path);
  CHECK_HAS(err2.msg, "refused");
}

/* ---- raw REP servers, as dpmd has ---- */

/* One request as a raw REP socket gets it: the unpacked Request and the
 * header to answer it with (ctrl, in nn_recvmsg's control format). */
typedef struct {
  Dpm__Request *rq;
  unsigned char ctrl[128];
} raw_req;

/* Receives one request (waiting up to timeout_ms). 0 on success. */
static int raw_recv(int sock, int timeout_ms, raw_req *r) {
  void *body = NULL;
  memset(r->ctrl, 0, sizeof r->ctrl);
  struct nn_iovec iov = {&body, NN_MSG};
  struct nn_msghdr h = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = r->ctrl,
                        .msg_controllen = sizeof r->ctrl};
  nn_setsockopt(sock, NN_SOL_SOCKET, NN_RCVTIMEO, &timeout_ms, sizeof timeout_ms);
  int n = nn_recvmsg(sock, &h, 0);
  if (n < 0) return -1;
  r->rq = dpm__request__unpack(NULL, (size_t)n, body);
  nn_freemsg(body);
  return r->rq ? 0 : -1;
}

/* Answers r (the header it came with) with resp. */
static void raw_reply(int sock, raw_req *r, Dpm__Response *resp) {
  uint8_t buf[512];
  size_t len = dpm__response__get_packed_size(resp);
  if (len > sizeof buf) return;
  dpm__response__pack(resp, buf);
  struct nn_iovec iov = {buf, len};
  struct nn_msghdr h = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = r->ctrl,
                        .msg_controllen = sizeof r->ctrl};
  nn_sendmsg(sock, &h, 0);
}

/* A ping answer naming instance (0: none), with the Response id given. */
static void raw_reply_ping(int sock, raw_req *r, uint64_t id, uint64_t instance) {
  Dpm__VersionInfo v = DPM__VERSION_INFO__INIT;
  v.version = "test";
  v.protocol = DPM_PROTOCOL_VERSION;
  v.has_instance = instance != 0;
  v.instance = instance;
  Dpm__Response resp = DPM__RESPONSE__INIT;
  resp.has_id = 1;
  resp.id = id;
  resp.result_case = DPM__RESPONSE__RESULT_VERSION;
  resp.version = &v;
  raw_reply(sock, r, &resp);
}

static void raw_reply_ok(int sock, raw_req *r, uint64_t id, const char *message) {
  Dpm__Response resp = DPM__RESPONSE__INIT;
  resp.has_id = 1;
  resp.id = id;
  resp.message = (char *)message;
  raw_reply(sock, r, &resp);
}

static int raw_server(const char *ep) {
  int s = nn_socket(AF_SP_RAW, NN_REP);
  if (s >= 0 && nn_bind(s, ep) < 0) {
    nn_close(s);
    s = -1;
  }
  return s;
}

/* What a scripted raw server saw. */
typedef struct {
  const char *ep;
  int sock;
  atomic_int stop;      /* set by the test when its call returned */
  uint64_t instance[2]; /* pings answered with [0], then (after the switch) [1] */
  int pings;            /* pings received */
  int requests;         /* other requests received */
  int resent;           /* requests received again by a second server */
  uint64_t request_id;  /* the last non-ping request's id */
  int failed;           /* a socket call of the server failed */
} script;

/* Never answers anything; counts what comes in. */
static void *serve_silent(void *arg) {
  script *sc = arg;
  while (!atomic_load(&sc->stop)) {
    raw_req r;
    if (raw_recv(sc->sock, 50, &r)) continue;
    if (r.rq->command_case == DPM__REQUEST__COMMAND_PING)
      sc->pings++;
    else
      sc->requests++;
    dpm__request__free_unpacked(r.rq, NULL);
  }
  return NULL;
}

TEST(client_silent_server_times_out) {
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://dpm-silent-%d", (int)getpid());
  script sc = {.ep = ep};
  atomic_init(&sc.stop, 0);
  sc.sock = raw_server(ep);
  CHECK(sc.sock >= 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, serve_silent, &sc) == 0);
  Dpm__Empty e = DPM__EMPTY__INIT;
  Dpm__Request rq = ping_request(&e);
  dpm_client *c;
  dpm_err err = {0}, err2 = {0};
  dpm_client_open(ep, 150, &c, &err);
  Dpm__Response *rs = (Dpm__Response *)1;
  double t0 = now_ms();
  dpm_status st = dpm_client_call(c, &rq, &rs, &err);
  double ms = now_ms() - t0;
  /* the socket stays usable: a second call times out the same way */
  dpm_client_set_timeout(c, 50);
  dpm_status st2 = dpm_client_call(c, &rq, &rs, &err2);
  atomic_store(&sc.stop, 1);
  pthread_join(th, NULL);
  nn_close(sc.sock);
  dpm_client_close(c);
  CHECK_INT(st, DPM_TIMEOUT);
  CHECK(rs == NULL);
  CHECK(ms >= 100 && ms < 2000);
  CHECK_HAS(err.msg, ep);
  CHECK_HAS(err.msg, "is dpmd running?");
  CHECK_INT(st2, DPM_TIMEOUT);
  CHECK_HAS(err2.msg, "within 50 ms");
}

TEST(client_liveness_gives_up_on_a_silent_daemon) {
  /* a long call (60 s timeout) to a daemon that answers nothing, not even
   * pings: it pings once a second and fails after DPM_LIVENESS_MS */
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://dpm-liveness-%d", (int)getpid());
  script sc = {.ep = ep};
  atomic_init(&sc.stop, 0);
  sc.sock = raw_server(ep);
  CHECK(sc.sock >= 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, serve_silent, &sc) == 0);
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = "m";
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_EVAL;
  rq.eval = &nr;
  dpm_client *c;
  dpm_err err = {0};
  dpm_client_open(ep, 60000, &c, &err);
  Dpm__Response *rs = (Dpm__Response *)1;
  double t0 = now_ms();
  dpm_status st = dpm_client_call(c, &rq, &rs, &err);
  double ms = now_ms() - t0;
  atomic_store(&sc.stop, 1);
  pthread_join(th, NULL);
  nn_close(sc.sock);
  dpm_client_close(c);
  CHECK_INT(st, DPM_TIMEOUT);
  CHECK(rs == NULL);
  CHECK(ms >= DPM_LIVENESS_MS - 100 && ms < DPM_LIVENESS_MS + 2000);
  CHECK_HAS(err.msg, "stopped answering");
  CHECK_HAS(err.msg, ep);
  CHECK_INT(sc.requests, 1); /* sent once */
  CHECK(sc.pings >= DPM_LIVENESS_MS / DPM_PING_AFTER_MS - 2);
}

/* A daemon that answers a late call after its caller gave up: the answer
 * comes when the next call waits, with an old id, then that call's own. */
static void *serve_late(void *arg) {
  script *sc = arg;
  raw_req r1, r2;
  if (raw_recv(sc->sock, 5000, &r1)) goto fail;
  usleep(300000); /* the first call (100 ms) gave up */
  raw_reply_ok(sc->sock, &r1, r1.rq->id, "late");
  if (raw_recv(sc->sock, 5000, &r2)) goto fail;
  raw_reply_ok(sc->sock, &r2, r1.rq->id, "stale again");
  usleep(50000); /* the stale one surely first */
  raw_reply_ok(sc->sock, &r2, r2.rq->id, "yours");
  sc->request_id = r2.rq->id;
  dpm__request__free_unpacked(r1.rq, NULL);
  dpm__request__free_unpacked(r2.rq, NULL);
  return NULL;
fail:
  sc->failed = 1;
  return NULL;
}

TEST(client_skips_answers_to_earlier_calls) {
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://dpm-late-%d", (int)getpid());
  script sc = {.ep = ep};
  sc.sock = raw_server(ep);
  CHECK(sc.sock >= 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, serve_late, &sc) == 0);
  Dpm__Request rq = DPM__REQUEST__INIT;
  Dpm__Empty e = DPM__EMPTY__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_LIST;
  rq.list = &e;
  dpm_client *c;
  dpm_err err1 = {0}, err2 = {0};
  dpm_client_open(ep, 100, &c, &err1);
  Dpm__Response *rs1 = NULL, *rs2 = NULL;
  dpm_status st1 = dpm_client_call(c, &rq, &rs1, &err1);
  usleep(400000); /* the late answer is waiting in the socket */
  dpm_client_set_timeout(c, 5000);
  dpm_status st2 = dpm_client_call(c, &rq, &rs2, &err2);
  pthread_join(th, NULL);
  nn_close(sc.sock);
  dpm_client_close(c);
  int yours =
      rs2 && rs2->message && !strcmp(rs2->message, "yours") && rs2->id == sc.request_id;
  dpm_client_free_response(rs2);
  CHECK(!sc.failed);
  CHECK_INT(st1, DPM_TIMEOUT);
  CHECK_INT(st2, DPM_OK);
  CHECK(yours);
}

/* Answers pings with instance[0] until the first other request, which it
 * never answers; pings after that get instance[1] (as if the daemon had
 * restarted). */
static void *serve_restart(void *arg) {
  script *sc = arg;
  while (!atomic_load(&sc->stop)) {
    raw_req r;
    if (raw_recv(sc->sock, 50, &r)) continue;
    if (r.rq->command_case == DPM__REQUEST__COMMAND_PING) {
      raw_reply_ping(sc->sock, &r, r.rq->id, sc->instance[sc->requests > 0]);
      sc->pings++;
    } else {
      sc->requests++;
      sc->request_id = r.rq->id;
    }
    dpm__request__free_unpacked(r.rq, NULL);
  }
  return NULL;
}

TEST(client_detects_a_restart_from_ping_answers) {
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://dpm-restart-%d", (int)getpid());
  script sc = {.ep = ep, .instance = {0xa11ce, 0xb0b}};
  atomic_init(&sc.stop, 0);
  sc.sock = raw_server(ep);
  CHECK(sc.sock >= 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, serve_restart, &sc) == 0);
  dpm_client *c;
  dpm_err err = {0}, perr = {0};
  dpm_client_open(ep, 30000, &c, &err);
  uint64_t before = dpm_client_instance(c);
  dpm_status ps = dpm_client_ping(c, NULL, &perr); /* learns the instance */
  uint64_t learned = dpm_client_instance(c);
  Dpm__TrainRequest tr = DPM__TRAIN_REQUEST__INIT;
  tr.name = "m";
  tr.iters = 100000;
  tr.has_wait = tr.wait = 1;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_TRAIN;
  rq.train = &tr;
  Dpm__Response *rs = (Dpm__Response *)1;
  double t0 = now_ms();
  dpm_status st = dpm_client_call(c, &rq, &rs, &err);
  double ms = now_ms() - t0;
  uint64_t after = dpm_client_instance(c);
  /* from now on the new instance is the known one: a ping is fine */
  dpm_status ps2 = dpm_client_ping(c, NULL, &perr);
  atomic_store(&sc.stop, 1);
  pthread_join(th, NULL);
  nn_close(sc.sock);
  dpm_client_close(c);
  CHECK(before == 0);
  CHECK_INT(ps, DPM_OK);
  CHECK(learned == 0xa11ce);
  CHECK_INT(st, DPM_IO);
  CHECK(rs == NULL);
  CHECK(ms < 2.5 * DPM_PING_AFTER_MS); /* at the first ping's answer */
  CHECK_HAS(err.msg, "restarted; the request was lost");
  CHECK(after == 0xb0b);
  CHECK_INT(ps2, DPM_OK);
  CHECK_INT(sc.requests, 1);
}

TEST(client_ping_reports_another_instance) {
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://dpm-ping-instance-%d", (int)getpid());
  script sc = {.ep = ep, .instance = {7, 8}};
  atomic_init(&sc.stop, 0);
  sc.sock = raw_server(ep);
  CHECK(sc.sock >= 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, serve_restart, &sc) == 0);
  dpm_client *c;
  dpm_err err = {0}, err2 = {0}, err3 = {0};
  dpm_client_open(ep, 2000, &c, &err);
  Dpm__Response *rs = NULL;
  dpm_status s1 = dpm_client_ping(c, &rs, &err);
  int answered = rs && rs->result_case == DPM__RESPONSE__RESULT_VERSION;
  dpm_client_free_response(rs);
  dpm_status s2 = dpm_client_ping(c, NULL, &err2); /* the same: fine */
  /* a request the server does not answer switches it to instance 8 */
  Dpm__Request rq = DPM__REQUEST__INIT;
  Dpm__Empty e = DPM__EMPTY__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_METRICS;
  rq.metrics = &e;
  dpm_client_set_timeout(c, 200);
  dpm_status s3 = dpm_client_call(c, &rq, &rs, &err3);
  dpm_status s4 = dpm_client_ping(c, NULL, &err);
  atomic_store(&sc.stop, 1);
  pthread_join(th, NULL);
  nn_close(sc.sock);
  dpm_client_close(c);
  CHECK_INT(s1, DPM_OK);
  CHECK(answered);
  CHECK_INT(s2, DPM_OK);
  CHECK_INT(s3, DPM_TIMEOUT); /* 200 ms: before any liveness ping */
  CHECK_INT(s4, DPM_IO);
  CHECK_HAS(err.msg, "restarted");
}

/* The first server answers pings (instance[0]) and takes one request, then
 * closes without answering it; a second one binds the same endpoint, answers
 * pings with instance[1] and records whether the request comes again. */
static void *serve_then_rebind(void *arg) {
  script *sc = arg;
  while (!sc->requests) {
    raw_req r;
    if (raw_recv(sc->sock, 5000, &r)) {
      sc->failed = 1;
      return NULL;
    }
    if (r.rq->command_case == DPM__REQUEST__COMMAND_PING) {
      raw_reply_ping(sc->sock, &r, r.rq->id, sc->instance[0]);
      sc->pings++;
    } else {
      sc->requests++;
      sc->request_id = r.rq->id;
    }
    dpm__request__free_unpacked(r.rq, NULL);
  }
  nn_close(sc->sock);
  usleep(50000);
  if ((sc->sock = raw_server(sc->ep)) < 0) {
    sc->failed = 1;
    return NULL;
  }
  /* past the client's call, and a moment more for a late resend */
  for (double end = -1; end < 0 || now_ms() < end;) {
    if (end < 0 && atomic_load(&sc->stop)) end = now_ms() + 500;
    raw_req r;
    if (raw_recv(sc->sock, 50, &r)) continue;
    if (r.rq->command_case == DPM__REQUEST__COMMAND_PING)
      raw_reply_ping(sc->sock, &r, r.rq->id, sc->instance[1]);
    else if (r.rq->id == sc->request_id)
      sc->resent++;
    dpm__request__free_unpacked(r.rq, NULL);
  }
  return NULL;
}

TEST(client_never_sends_a_request_twice) {
  /* nanomsg's cooked REQ resent a request whose connection dropped to
   * whoever listened next: a train reached the restarted daemon again */
  char path[128], ep[160];
  snprintf(path, sizeof path, "/tmp/dpm-client-rebind-%d.sock", (int)getpid());
  snprintf(ep, sizeof ep, "ipc://%s", path);
  unlink(path);
  script sc = {.ep = ep, .instance = {0x1111, 0x2222}};
  atomic_init(&sc.stop, 0);
  sc.sock = raw_server(ep);
  CHECK(sc.sock >= 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, serve_then_rebind, &sc) == 0);
  dpm_client *c;
  dpm_err err = {0}, perr = {0};
  dpm_client_open(ep, 20000, &c, &err);
  dpm_status ps = dpm_client_ping(c, NULL, &perr);
  Dpm__CheckpointRequest cr = DPM__CHECKPOINT_REQUEST__INIT;
  cr.name = "m";
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_CHECKPOINT;
  rq.checkpoint = &cr;
  Dpm__Response *rs = (Dpm__Response *)1;
  double t0 = now_ms();
  dpm_status st = dpm_client_call(c, &rq, &rs, &err);
  double ms = now_ms() - t0;
  atomic_store(&sc.stop, 1);
  pthread_join(th, NULL);
  if (sc.sock >= 0) nn_close(sc.sock);
  dpm_client_close(c);
  unlink(path);
  CHECK(!sc.failed);
  CHECK_INT(ps, DPM_OK);
  CHECK_INT(sc.requests, 1);
  CHECK_INT(sc.resent, 0);
  CHECK_INT(st, DPM_IO);
  CHECK_HAS(err.msg, "restarted; the request was lost");
  CHECK(ms < DPM_LIVENESS_MS);
}

/* A REP server for three requests: a reply with a wrong id (DPM_CORRUPT:
 * nanomsg's REQ matched it to the request, so the daemon mixed up its
 * answers), a good reply, and garbage. */
typedef struct {
  int sock;
  int ok;         /* every request looked right */
  char token[64]; /* the token of the second request */
  uint64_t ids[3];
} server;

static void *serve(void *arg) {
  server *s = arg;
  s->ok = 1;
  for (int k = 0; k < 3; k++) {
    void *msg;
    int n = nn_recv(s->sock, &msg, NN_MSG, 0);
    if (n < 0) {
      s->ok = 0;
      return NULL;
    }
    Dpm__Request *rq = dpm__request__unpack(NULL, (size_t)n, msg);
    nn_freemsg(msg);
    if (!rq || rq->version != DPM_PROTOCOL_VERSION || !rq->has_id) s->ok = 0;
    if (!rq) return NULL;
    s->ids[k] = rq->id;
    if (k == 1 && rq->token) snprintf(s->token, sizeof s->token, "%s", rq->token);
    if (k == 1 && rq->command_case != DPM__REQUEST__COMMAND_STATUS) s->ok = 0;
    Dpm__Response r = DPM__RESPONSE__INIT;
    Dpm__ModelInfo mi = DPM__MODEL_INFO__INIT;
    r.has_id = 1;
    r.id = k == 0 ? rq->id + 1000 : rq->id;
    r.status = dpm_status_to_wire(DPM_NOT_FOUND);
    r.message = "no model named 'x'";
    if (k == 1) {
      r.status = DPM__STATUS__STATUS_OK;
      r.message = NULL;
      mi.name = rq->status->name;
      mi.state = "ready";
      r.result_case = DPM__RESPONSE__RESULT_MODEL;
      r.model = &mi;
    }
    uint8_t buf[256];
    size_t len = dpm__response__get_packed_size(&r);
    dpm__response__pack(&r, buf);
    if (k == 2) memcpy(buf, "\xff\xff\xff\xff", len = 4);
    nn_send(s->sock, buf, len, 0);
    dpm__request__free_unpacked(rq, NULL);
  }
  return NULL;
}

TEST(client_round_trip_and_matching) {
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://dpm-client-test-%d", (int)getpid());
  server s = {0};
  s.sock = nn_socket(AF_SP, NN_REP);
  CHECK(s.sock >= 0);
  CHECK(nn_bind(s.sock, ep) >= 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, serve, &s) == 0);

  dpm_client *c;
  dpm_err err = {0};
  CHECK_INT(dpm_client_open(ep, 300, &c, &err), DPM_OK);
  Dpm__NameRequest nr = DPM__NAME_REQUEST__INIT;
  nr.name = "mlp";
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_STATUS;
  rq.status = &nr;
  Dpm__Response *rs = NULL, *rs1 = NULL, *rs3 = NULL;
  dpm_err err1 = {0}, err3 = {0};
  /* 1: the reply carries another id */
  dpm_status st = dpm_client_call(c, &rq, &rs1, &err1);
  /* 2: matched, with the token */
  dpm_status tok = dpm_client_set_token(c, "s3cret", &err);
  dpm_client_set_timeout(c, 5000);
  dpm_status st2 = dpm_client_call(c, &rq, &rs, &err);
  /* 3: garbage */
  dpm_client_set_token(c, NULL, &err);
  dpm_status st3 = dpm_client_call(c, &rq, &rs3, &err3);
  pthread_join(th, NULL);
  nn_close(s.sock);
  dpm_client_close(c);
  int good = rs && rs->status == DPM__STATUS__STATUS_OK &&
             rs->result_case == DPM__RESPONSE__RESULT_MODEL &&
             !strcmp(rs->model->name, "mlp") && !strcmp(rs->model->state, "ready");
  dpm_client_free_response(rs);

  CHECK_INT(st, DPM_CORRUPT);
  CHECK(rs1 == NULL);
  CHECK_HAS(err1.msg, "with the response to request");
  CHECK_INT(tok, DPM_OK);
  CHECK_INT(st2, DPM_OK);
  CHECK(good);
  CHECK_INT(st3, DPM_CORRUPT);
  CHECK(rs3 == NULL);
  CHECK_HAS(err3.msg, "not a dpm Response");
  CHECK(s.ok);
  CHECK(!strcmp(s.token, "s3cret"));
  CHECK(s.ids[1] > s.ids[0] && s.ids[2] > s.ids[1]);
}

/* Publishes "MODEL\n" + a packed Event. */
static void publish(int pub, const char *model, uint64_t iter) {
  Dpm__ModelInfo m = DPM__MODEL_INFO__INIT;
  m.name = (char *)model;
  m.state = "training";
  m.has_iter = 1;
  m.iter = iter;
  Dpm__Event e = DPM__EVENT__INIT;
  e.kind = DPM__EVENT_KIND__EVENT_PROGRESS;
  e.model = &m;
  uint8_t buf[256];
  size_t k = strlen(model), n = dpm__event__get_packed_size(&e);
  memcpy(buf, model, k);
  buf[k] = '\n';
  dpm__event__pack(&e, buf + k + 1);
  nn_send(pub, buf, k + 1 + n, 0);
}

TEST(client_events_filter_and_skip_garbage) {
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://dpm-events-test-%d", (int)getpid());
  int pub = nn_socket(AF_SP, NN_PUB);
  CHECK(pub >= 0);
  CHECK(nn_bind(pub, ep) >= 0);
  dpm_events *ev;
  dpm_err err = {0};
  if (dpm_events_open(ep, "mlp", &ev, &err)) {
    nn_close(pub);
    CHECK(!"dpm_events_open");
  }
  Dpm__Event *e = NULL;
  /* nothing published yet */
  dpm_status none = dpm_events_next(ev, 20, &e, &err);
  /* the subscription connects in the background: publish until one arrives */
  dpm_status st = DPM_TIMEOUT;
  for (int k = 0; k < 50 && st == DPM_TIMEOUT; k++) {
    nn_send(pub, "mlp\n\xff\xff\xff", 7, 0); /* garbage on the topic: skipped */
    nn_send(pub, "mlp-no-newline", 14, 0);   /* another topic */
    publish(pub, "mlp2", 1);                 /* another model: filtered */
    publish(pub, "mlp", 7);
    st = dpm_events_next(ev, 50, &e, &err);
  }
  int good = st == DPM_OK && !strcmp(e->model->name, "mlp") && e->model->iter == 7 &&
             e->kind == DPM__EVENT_KIND__EVENT_PROGRESS;
  dpm_event_free(e);
  dpm_events_close(ev);
  CHECK_INT(none, DPM_TIMEOUT);
  CHECK_INT(st, DPM_OK);
  CHECK(good);

  /* every model */
  if (dpm_events_open(ep, NULL, &ev, &err)) {
    nn_close(pub);
    CHECK(!"dpm_events_open(NULL)");
  }
  st = DPM_TIMEOUT;
  for (int k = 0; k < 50 && st == DPM_TIMEOUT; k++) {
    publish(pub, "other", 3);
    st = dpm_events_next(ev, 50, &e, &err);
  }
  good = st == DPM_OK && !strcmp(e->model->name, "other");
  dpm_event_free(e);
  dpm_events_close(ev);
  nn_close(pub);
  CHECK_INT(st, DPM_OK);
  CHECK(good);
}

/* A scripted dpmd for the events stream: where the stream stands (5), then
 * a batch with a garbage entry and mlp's event (next 7), then empty
 * batches (a long poll that timed out); pings answered. */
typedef struct {
  int sock;
  atomic_int stop;
  int asks;          /* events requests */
  int first_after;   /* the first had no `after` */
  uint64_t after[2]; /* the second's and third's */
  int named;         /* each named mlp */
} stream_script;

static void *serve_stream(void *arg) {
  stream_script *sc = arg;
  while (!atomic_load(&sc->stop)) {
    raw_req r;
    if (raw_recv(sc->sock, 50, &r)) continue;
    if (r.rq->command_case == DPM__REQUEST__COMMAND_PING) {
      raw_reply_ping(sc->sock, &r, r.rq->id, 0);
    } else if (r.rq->command_case == DPM__REQUEST__COMMAND_EVENTS) {
      const Dpm__EventsRequest *er = r.rq->events;
      int k = sc->asks++;
      if (k == 0) sc->first_after = er->has_after;
      if (k == 1 || k == 2) sc->after[k - 1] = er->after;
      sc->named += er->name && !strcmp(er->name, "mlp");
      Dpm__ModelInfo m = DPM__MODEL_INFO__INIT;
      m.name = "mlp";
      m.state = "training";
      m.has_iter = 1;
      m.iter = 7;
      Dpm__Event e = DPM__EVENT__INIT;
      e.kind = DPM__EVENT_KIND__EVENT_PROGRESS;
      e.model = &m;
      uint8_t packed[128], garbage[3] = {0xff, 0xff, 0xff};
      ProtobufCBinaryData ev[2] = {{sizeof garbage, garbage},
                                   {dpm__event__pack(&e, packed), packed}};
      Dpm__EventBatch b = DPM__EVENT_BATCH__INIT;
      b.next = k == 0 ? 5 : 7;
      if (k == 1) {
        b.n_event = 2;
        b.event = ev;
      }
      Dpm__Response resp = DPM__RESPONSE__INIT;
      resp.has_id = 1;
      resp.id = r.rq->id;
      resp.result_case = DPM__RESPONSE__RESULT_EVENTS;
      resp.events = &b;
      raw_reply(sc->sock, &r, &resp);
    }
    dpm__request__free_unpacked(r.rq, NULL);
  }
  return NULL;
}

/* dpm_events_open_stream: events through the request socket (a daemon
 * without an events socket), from where the stream stood at opening, an
 * entry that does not unpack skipped, the next request after the last
 * number seen, and no event within the timeout is DPM_TIMEOUT. */
TEST(client_events_stream) {
  char ep[64];
  snprintf(ep, sizeof ep, "inproc://dpm-stream-%d", (int)getpid());
  stream_script sc = {.sock = raw_server(ep)};
  CHECK(sc.sock >= 0);
  pthread_t th;
  CHECK_INT(pthread_create(&th, NULL, serve_stream, &sc), 0);
  dpm_client *c = NULL;
  dpm_events *ev = NULL;
  dpm_err err = {0};
  Dpm__Event *e = NULL;
  dpm_status open = dpm_client_open(ep, 5000, &c, &err), got = DPM_INTERNAL, idle = 0;
  if (!open) open = dpm_events_open_stream(c, "mlp", &ev, &err);
  int fd = ev ? dpm_events_fd(ev) : 0;
  if (!open) got = dpm_events_next(ev, 2000, &e, &err);
  int good = got == DPM_OK && e && !strcmp(e->model->name, "mlp") && e->model->iter == 7;
  dpm_event_free(e);
  e = NULL;
  if (!open) idle = dpm_events_next(ev, 100, &e, &err);
  dpm_events_close(ev);
  dpm_client_close(c);
  atomic_store(&sc.stop, 1);
  pthread_join(th, NULL);
  nn_close(sc.sock);
  CHECK_INT(open, DPM_OK);
  CHECK_INT(fd, -1);
  CHECK_INT(got, DPM_OK);
  CHECK(good);
  CHECK_INT(idle, DPM_TIMEOUT);
  CHECK(e == NULL);
  CHECK(sc.asks >= 3);
  CHECK_INT(sc.first_after, 0);
  CHECK_INT((int)sc.after[0], 5);
  CHECK_INT((int)sc.after[1], 7);
  CHECK_INT(sc.named, sc.asks);
}
