/* Client side without a daemon: the JSON writer (escaping, invalid UTF-8,
 * non-finite and round-tripping numbers, misuse), dpmctl's command-line
 * parser (the verb-table rules, numbers, lists), and the client library
 * against a REP server and a PUB socket in a thread of this test (inproc):
 * request fields, token, reply matching by id, garbage replies, events
 * filtered by model with garbage skipped; a bad endpoint is DPM_IO and no
 * daemon is DPM_TIMEOUT within the timeout. */
#include <nanomsg/nn.h>
#include <nanomsg/pubsub.h>
#include <nanomsg/reqrep.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "dpm/client.h"
#include "lib/json.h"
#include "test.h"

/* dpmctl's parser has no daemon or output dependencies: test it in place. */
#include "dpmctl/args.c"

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
    {"ping", "ping", 0, 0, 0, 0, dummy, 1, 0},
    {"status", "status [NAME]", 0, 1, 0, 0, dummy, 1, 0},
    {"train", "train NAME --iters N [--wait]", 1, 1, OPT(O_ITERS) | OPT(O_WAIT),
     OPT(O_ITERS), dummy, 1, 0},
    {"load", "load NAME FILE", 2, 2, 0, 0, dummy, 1, 1},
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
  /* help: with or without a command, missing arguments do not matter */
  CHECK_INT(parse(&a, msg, "--help", NULL), CTL_OK);
  CHECK(a.opt[O_HELP] && !a.verb);
  CHECK_INT(parse(&a, msg, "train", "-h", NULL), CTL_OK);
  CHECK(a.opt[O_HELP] && a.verb == &VERBS[2]);
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

TEST(client_no_daemon_times_out) {
  char ep[128];
  snprintf(ep, sizeof ep, "ipc:///tmp/dpm-client-test-%d.sock", (int)getpid());
  dpm_client *c;
  dpm_err err = {0};
  CHECK_INT(dpm_client_open(ep, 150, &c, &err), DPM_OK);
  CHECK(!strcmp(dpm_client_endpoint(c), ep));
  Dpm__Empty e = DPM__EMPTY__INIT;
  Dpm__Request rq = DPM__REQUEST__INIT;
  rq.command_case = DPM__REQUEST__COMMAND_PING;
  rq.ping = &e;
  Dpm__Response *rs = (Dpm__Response *)1;
  double t0 = now_ms();
  CHECK_INT(dpm_client_call(c, &rq, &rs, &err), DPM_TIMEOUT);
  double ms = now_ms() - t0;
  CHECK(rs == NULL);
  CHECK(ms >= 100 && ms < 2000);
  CHECK_HAS(err.msg, ep);
  CHECK_HAS(err.msg, "is dpmd running?");
  /* the socket stays usable: a second call times out the same way */
  dpm_client_set_timeout(c, 50);
  CHECK_INT(dpm_client_call(c, &rq, &rs, &err), DPM_TIMEOUT);
  CHECK_HAS(err.msg, "within 50 ms");
  dpm_client_close(c);
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
    r.status = DPM_NOT_FOUND;
    r.message = "no model named 'x'";
    if (k == 1) {
      r.status = DPM_OK;
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
  int good = rs && rs->status == DPM_OK &&
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
