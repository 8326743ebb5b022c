// Gloo behind a C interface (gloo_shim.h): a TCP context formed through a
// rendezvous store, and exchange, allreduce, broadcast and barrier on it.
// Every function of the C interface catches everything Gloo and the C++
// library throw and turns it into a dpm_status and a message.
//
// The rendezvous store is the caller's (comm/store.h: file, redis or
// key-value callbacks), seen by Gloo through StoreKV, whose waits are all
// bounded by the job's timeout: Gloo's rendezvous reads rank_0's key with a
// plain get, which would otherwise wait the store's default 30 s for a
// missing process 0.
//
// Once connected, the processes swap the addresses of their connections'
// ends (alltoall), so that an error Gloo reports against an address
// ("Connection closed by peer [ADDR]") names the process behind it.
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allgatherv.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/alltoallv.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <gloo/types.h>

#include "comm/gloo_shim.h"
extern "C" {
#include "comm/store.h"
#include "engine/lowp.h"
}

namespace {

using Ms = std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using Keys = std::vector<std::string>;

// A failure of one of this file's stores, with its status. `key` is the
// key waited for, when a wait timed out.
struct StoreError : std::runtime_error {
  dpm_status code;
  std::string key;
  StoreError(dpm_status c, const std::string &m, const std::string &k = "")
      : std::runtime_error(m), code(c), key(k) {}
};

// The rendezvous store as Gloo's Store. Every wait is bounded by the job's
// timeout, and the keys of a wait are waited for in turn, so that a
// timeout names its key. Keeps what it got (the peers' published
// addresses, for naming them).
class StoreKV : public gloo::rendezvous::Store {
public:
  StoreKV(dpm_store *store, Ms timeout) : store_(store), timeout_(timeout) {}
  void set(const std::string &key, const std::vector<char> &data) override {
    dpm_err e = {};
    dpm_status s = dpm_store_set(store_, key.c_str(), data.data(), data.size(), &e);
    if (s) throw StoreError(s, e.msg, key);
  }
  std::vector<char> get(const std::string &key) override {
    void *v = nullptr;
    size_t n = 0;
    dpm_err e = {};
    dpm_status s = dpm_store_get(store_, key.c_str(), ms(timeout_), &v, &n, &e);
    std::unique_ptr<void, void (*)(void *)> owned(v, free);
    if (s) throw StoreError(s, e.msg, key);
    const char *p = static_cast<const char *>(v);
    std::vector<char> got(p, p + (p ? n : 0));
    got_[key] = got;
    return got;
  }
  const std::vector<char> *got(const std::string &key) const {
    auto it = got_.find(key);
    return it == got_.end() ? nullptr : &it->second;
  }
  void wait(const Keys &keys) override { wait(keys, timeout_); }
  void wait(const Keys &keys, const Ms &timeout) override {
    Ms bound = timeout == gloo::kNoTimeout ? timeout_ : std::min(timeout, timeout_);
    auto until = Clock::now() + bound;
    for (const auto &k : keys) {
      auto left = std::chrono::duration_cast<Ms>(until - Clock::now());
      const char *one = k.c_str();
      dpm_err e = {};
      dpm_status s = dpm_store_wait(store_, &one, 1, ms(std::max(left, Ms(1))), &e);
      if (s) throw StoreError(s, e.msg, k);
    }
  }

private:
  static int ms(Ms t) { return (int)std::min<long long>(t.count(), INT32_MAX); }
  dpm_store *const store_;
  const Ms timeout_;
  std::map<std::string, std::vector<char>> got_;
};

// One end of a connection: Gloo's text of it (what its errors print) and
// a readable one (host:port).
struct Addr {
  char match[64];
  char show[64];
};

// Gloo's reduce function for T: c = a + b elementwise (c may be a).
template <class T> void sum_of(void *c, const void *a, const void *b, size_t n) {
  T *__restrict t = static_cast<T *>(c);
  const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
  if (t == x) {
    for (size_t i = 0; i < n; i++) t[i] += y[i];
  } else {
    for (size_t i = 0; i < n; i++) t[i] = x[i] + y[i];
  }
}

// Gloo's messages start with "[/path/file.cc:123] ": keep what follows.
std::string gloo_text(const char *what) {
  std::string s(what ? what : "");
  while (s.size() > 1 && s[0] == '[') {
    size_t end = s.find("] ");
    if (end == std::string::npos) break;
    s.erase(0, end + 2);
  }
  return s;
}

bool says_timeout(const std::string &s) {
  return s.find("imed out") != std::string::npos || s.find("imeout") != std::string::npos;
}

// SIGPIPE blocked in this thread while it lives. Gloo writes to its peers
// from the calling thread as well as from its device's I/O thread (which
// starts with the mask of the thread that creates the device, so under
// one of these in dpm_gloo_create): a peer gone mid-write must be an EPIPE
// error for the collective, not a signal that ends the process. A SIGPIPE
// raised meanwhile (pending, as it is blocked) is taken back before the
// mask is restored.
class NoSigpipe {
public:
  NoSigpipe() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~NoSigpipe() {
    sigset_t pending;
    if (!was_pending_ && !sigpending(&pending) && sigismember(&pending, SIGPIPE) == 1) {
      struct timespec zero = {0, 0};
      while (sigtimedwait(&pipe_, nullptr, &zero) < 0 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  NoSigpipe(const NoSigpipe &) = delete;
  NoSigpipe &operator=(const NoSigpipe &) = delete;

private:
  sigset_t pipe_, old_;
  bool was_pending_ = false;
};

// Slot of exchange's messages: a prefix none of Gloo's algorithms uses.
constexpr uint8_t kExchangeSlotPrefix = 0x40;

// Whether an exchange posts the next one's receives as it ends. Gloo's
// unbound buffers may be destroyed with a receive pending (the I/O thread
// lets go of them first), but libgloo is not built for ThreadSanitizer,
// which cannot see that hand-over: its builds post each exchange's
// receives in the call instead.
#if defined(__SANITIZE_THREAD__)
constexpr bool kPrepost = false;
#else
constexpr bool kPrepost = true;
#endif

} // namespace

struct dpm_gloo {
  int rank, size, local_ranks, timeout_ms;
  std::shared_ptr<gloo::transport::Device> dev;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::vector<Addr> peers; // [size] each process's end of its connection to this one
  // [size] the address each process published for its connection to this
  // one: Gloo names a peer by it when the peer connected before this side
  // called connect (Gloo then keeps it as the peer's address)
  std::vector<std::string> published;
  bool spent = false;    // a collective failed: the context is closed
  std::string spent_msg; // that failure
  // exchange: its size (fixed by the first call), the receive buffers (one
  // per peer, at xin + peer * xbytes) and the send buffer, kept from call
  // to call; which receives are posted (kPrepost: the next call's, as soon
  // as one ends, so that a peer's next header goes out at once instead of
  // after our "ready to receive" reached it)
  size_t xbytes = 0;
  std::vector<char> xin, xout; // [size * xbytes], [xbytes]
  std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> xrecv; // [size]
  std::unique_ptr<gloo::transport::UnboundBuffer> xsend;
  std::vector<char> xposted; // [size]
  // allreduce_bf16's scratch, grown only: the vector in bf16 (wire); every
  // process's bf16 copy of the whole vector (up to kGatherAll processes) or
  // of this process's segment (gathered); one chunk of a copy widened
  std::vector<uint16_t> wire, gathered;
  std::vector<float> widened; // [kSumChunk]
};

namespace {

// The failure of a call, from inside its catch: status and message into
// err, the context marked spent. `what`: the collective's head ("allreduce");
// `waiting`: whom a timeout waited for, when Gloo's message does not say.
dpm_status caught(dpm_gloo *g, const char *what, dpm_err *err,
                  const std::string &waiting = "") {
  dpm_status code = DPM_INTERNAL;
  std::string text;
  try {
    throw;
  } catch (const StoreError &e) {
    code = e.code;
    text = e.what();
  } catch (const gloo::IoException &e) {
    text = gloo_text(e.what());
    code = says_timeout(text) ? DPM_TIMEOUT : DPM_IO;
  } catch (const gloo::EnforceNotMet &e) {
    text = gloo_text(e.what());
    if (text.find("already exists") != std::string::npos ||
        text.find("already set") != std::string::npos)
      code = DPM_EXISTS; // a store key set twice (a reused prefix)
  } catch (const std::bad_alloc &) {
    code = DPM_NOMEM;
    text = "out of memory";
  } catch (const std::exception &e) {
    text = gloo_text(e.what());
    code = says_timeout(text) ? DPM_TIMEOUT : DPM_IO;
  } catch (...) {
    text = "unknown exception";
  }
  // Name the peer Gloo names by its address (either of the two).
  std::string who;
  for (int q = 0; g && q < g->size && who.empty(); q++) {
    if (q == g->rank) continue;
    const char *end = g->peers[(size_t)q].match;
    const std::string &pub = g->published[(size_t)q];
    if ((*end && text.find(end) != std::string::npos) ||
        (!pub.empty() && text.find(pub) != std::string::npos)) {
      char d[160];
      dpm_gloo_describe(g, q, d, sizeof d);
      who = d;
    }
  }
  if (who.empty()) who = waiting;
  if (who.empty() && g && g->size == 2) { // one peer: the one any wait was for
    char d[160];
    dpm_gloo_describe(g, 1 - g->rank, d, sizeof d);
    who = d;
  }
  std::string msg;
  if (code == DPM_TIMEOUT)
    msg = std::string(what) + ": timed out after " + std::to_string(g->timeout_ms) +
          " ms" + (who.empty() ? "" : " waiting for " + who) + " (" + text + ")";
  else if (code == DPM_IO && !who.empty())
    msg = std::string(what) + ": lost " + who + " (" + text + ")";
  else
    msg = std::string(what) + ": " + text;
  g->spent = true;
  g->spent_msg = msg;
  return dpm_errf(err, code, "%s", msg.c_str());
}

dpm_status spent(dpm_gloo *g, const char *what, dpm_err *err) {
  return dpm_errf(err, DPM_STATE, "%s: the gloo context failed earlier (%s)", what,
                  g->spent_msg.c_str());
}

// Whether interface `name` exists and has an IPv4 or IPv6 address (Gloo's
// own lookup throws, and leaks, otherwise).
dpm_status check_iface(const char *name, dpm_err *err) {
  if (!if_nametoindex(name))
    return dpm_errf(err, DPM_INVALID, "no network interface '%s'", name);
  struct ifaddrs *all;
  if (getifaddrs(&all))
    return dpm_errf(err, DPM_IO, "listing network interfaces: %s", strerror(errno));
  bool found = false;
  for (struct ifaddrs *a = all; a && !found; a = a->ifa_next)
    found = a->ifa_addr && !strcmp(a->ifa_name, name) &&
            (a->ifa_addr->sa_family == AF_INET || a->ifa_addr->sa_family == AF_INET6);
  freeifaddrs(all);
  return found ? DPM_OK
               : dpm_errf(err, DPM_INVALID, "network interface '%s' has no IP address",
                          name);
}

void show_addr(const struct sockaddr_storage &ss, char *buf, size_t cap) {
  char ip[INET6_ADDRSTRLEN] = "?";
  int port = 0;
  if (ss.ss_family == AF_INET) {
    auto *in = reinterpret_cast<const struct sockaddr_in *>(&ss);
    inet_ntop(AF_INET, &in->sin_addr, ip, sizeof ip);
    port = ntohs(in->sin_port);
    snprintf(buf, cap, "%s:%d", ip, port);
  } else if (ss.ss_family == AF_INET6) {
    auto *in6 = reinterpret_cast<const struct sockaddr_in6 *>(&ss);
    inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof ip);
    port = ntohs(in6->sin6_port);
    snprintf(buf, cap, "[%s]:%d", ip, port);
  } else {
    snprintf(buf, cap, "?");
  }
}

// The process a rendezvous key belongs to ("PREFIX/rank_3", "PREFIX/3"), or -1.
int key_process(const std::string &key) {
  size_t slash = key.rfind('/');
  std::string last = slash == std::string::npos ? key : key.substr(slash + 1);
  if (last.rfind("rank_", 0) == 0) last = last.substr(5);
  if (last.empty() || last.size() > 9) return -1;
  for (char ch : last)
    if (ch < '0' || ch > '9') return -1;
  return atoi(last.c_str());
}

// A TCP device whose I/O thread runs under SCHED_IDLE. That thread polls
// its pairs (level-triggered epoll) and only try-locks a pair that a
// caller's thread holds: woken on the core of the replica that holds the
// lock (dpm_comm_create starts a trainer's group on its replicas' cores),
// it would preempt that replica and spin on the lock until its time slice
// ends, milliseconds a collective (measured: 3.9 of a 5.4 ms step of the
// MLP at 2 shards x 1 device, where the all-reduce alone takes 0.6 ms). An
// idle-policy thread never preempts the replica and runs as soon as the
// replica blocks in the collective; the cost is that on cores kept busy by
// other work it runs only in their idle time. Made on a thread of its own,
// since an unprivileged thread cannot leave SCHED_IDLE again (the I/O
// thread takes its policy and signal mask from the thread that creates the
// device); Gloo's exceptions are rethrown here.
std::shared_ptr<gloo::transport::Device>
io_device(const gloo::transport::tcp::attr &attr) {
  std::shared_ptr<gloo::transport::Device> dev;
  std::exception_ptr failed;
  std::thread maker([&] {
    struct sched_param none = {};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &none); /* best effort */
    try {
      dev = gloo::transport::tcp::CreateDevice(attr);
    } catch (...) {
      failed = std::current_exception();
    }
  });
  maker.join();
  if (failed) std::rethrow_exception(failed);
  return dev;
}

// Connect: store, device, context, then the addresses of the connections.
void form(dpm_gloo *g, const dpm_gloo_config *cfg) {
  Ms timeout(cfg->timeout_ms);
  StoreKV bounded(cfg->store, timeout);
  gloo::rendezvous::PrefixStore store(cfg->prefix, bounded);

  gloo::transport::tcp::attr attr;
  if (cfg->iface) attr.iface = cfg->iface;
  g->dev = io_device(attr); // its I/O thread: no SIGPIPE
  auto ctx = std::make_shared<gloo::rendezvous::Context>(g->rank, g->size);
  ctx->setTimeout(timeout);
  ctx->connectFullMesh(store, g->dev);
  g->ctx = ctx;
  if (g->size == 1) return;

  std::vector<Addr> mine((size_t)g->size), theirs((size_t)g->size);
  memset(mine.data(), 0, mine.size() * sizeof(Addr));
  memset(theirs.data(), 0, theirs.size() * sizeof(Addr));
  for (int q = 0; q < g->size; q++) {
    if (q == g->rank) continue;
    const auto &a = ctx->getPair(q)->address();
    Addr &m = mine[(size_t)q];
    snprintf(m.match, sizeof m.match, "%s", a.str().c_str());
    auto *tcp = dynamic_cast<const gloo::transport::tcp::Address *>(&a);
    if (tcp)
      show_addr(tcp->getSockaddr(), m.show, sizeof m.show);
    else
      snprintf(m.show, sizeof m.show, "%s", m.match);
  }
  gloo::AlltoallOptions o(ctx);
  o.setInput(reinterpret_cast<char *>(mine.data()), mine.size() * sizeof(Addr));
  o.setOutput(reinterpret_cast<char *>(theirs.data()), theirs.size() * sizeof(Addr));
  o.setTimeout(timeout);
  gloo::alltoall(o);
  for (auto &a : theirs) {
    a.match[sizeof a.match - 1] = 0;
    a.show[sizeof a.show - 1] = 0;
  }
  g->peers = theirs;
  // What each peer published for us: its key's value holds one address per
  // other process, ours at our rank (less one past the peer's own).
  for (int q = 0; q < g->size; q++) {
    const std::vector<char> *v =
        bounded.got(std::string(cfg->prefix) + "/" + std::to_string(q));
    if (q == g->rank || !v || v->size() % (size_t)(g->size - 1)) continue;
    size_t each = v->size() / (size_t)(g->size - 1);
    size_t at = (size_t)(g->rank > q ? g->rank - 1 : g->rank) * each;
    std::vector<char> one(v->begin() + (long)at, v->begin() + (long)(at + each));
    try {
      g->published[(size_t)q] = gloo::transport::tcp::Address(one).str();
    } catch (const std::exception &) { /* only for messages */
    }
  }
}

} // namespace

// Gloo's ring allreduce of count T at buf, in place (throws as Gloo does).
template <class T> static void ring_sum(dpm_gloo *g, T *buf, size_t count) {
  gloo::AllreduceOptions o(g->ctx);
  o.setOutput(buf, count);
  o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
  o.setReduceFunction(sum_of<T>);
  o.setTimeout(Ms(g->timeout_ms));
  gloo::allreduce(o);
}

// Elements of a segment widened and added per pass in allreduce_bf16.
constexpr size_t kSumChunk = 1024;
// Processes up to which allreduce_bf16 gathers every bf16 copy everywhere
// ((P-1) x 2 bytes per element sent, fewer than the segments' (P-1)/P x 6
// up to 3 processes) instead of summing segments at their owners.
constexpr int kGatherAll = 3;

// First element of process q's segment of count elements over size processes.
static size_t segment_start(size_t count, int size, int q) {
  size_t each = count / (size_t)size, extra = count % (size_t)size;
  return each * (size_t)q + std::min((size_t)q, extra);
}

// out[i] = ((x0[i] + x1[i]) + x2[i]) + ... in fp32: the bf16 rows x_q =
// rows + q * stride (q < nrows) widened, m elements. w: kSumChunk floats.
static void sum_rows(float *out, const uint16_t *rows, size_t stride, int nrows, size_t m,
                     float *w) {
  for (size_t at = 0; at < m; at += kSumChunk) {
    size_t n = std::min(kSumChunk, m - at);
    dpm_f32_from_bf16(out + at, rows + at, n);
    for (int q = 1; q < nrows; q++) {
      dpm_f32_from_bf16(w, rows + (size_t)q * stride + at, n);
      for (size_t i = 0; i < n; i++) out[at + i] += w[i];
    }
  }
}

// allreduce_bf16 on a context of several processes (throws as Gloo does).
static void bf16_sum(dpm_gloo *g, float *buf, size_t count) {
  int me = g->rank, size = g->size;
  if (g->wire.size() < count) g->wire.resize(count);
  if (g->widened.size() < kSumChunk) g->widened.resize(kSumChunk);
  dpm_bf16_from_f32(g->wire.data(), buf, count);
  if (size <= kGatherAll) { // every process gets every copy and sums them all
    if (g->gathered.size() < (size_t)size * count)
      g->gathered.resize((size_t)size * count);
    gloo::AllgatherOptions o(g->ctx);
    o.setInput(g->wire.data(), count);
    o.setOutput(g->gathered.data(), (size_t)size * count);
    o.setTimeout(Ms(g->timeout_ms));
    gloo::allgather(o);
    sum_rows(buf, g->gathered.data(), count, size, count, g->widened.data());
    return;
  }
  std::vector<int64_t> split((size_t)size), mine((size_t)size);
  std::vector<size_t> seg((size_t)size);
  for (int q = 0; q < size; q++)
    seg[(size_t)q] = segment_start(count, size, q + 1) - segment_start(count, size, q);
  size_t lo = segment_start(count, size, me), m = seg[(size_t)me];
  for (int q = 0; q < size; q++) {
    split[(size_t)q] = (int64_t)seg[(size_t)q];
    mine[(size_t)q] = (int64_t)m;
  }
  if (g->gathered.size() < (size_t)size * m) g->gathered.resize((size_t)size * m);

  gloo::AlltoallvOptions a(g->ctx);
  a.setInput(g->wire.data(), split);
  a.setOutput(g->gathered.data(), mine);
  a.setTimeout(Ms(g->timeout_ms));
  gloo::alltoallv(a);

  // this process's segment: every process's copy of it, summed in order
  sum_rows(buf + lo, g->gathered.data(), m, size, m, g->widened.data());

  // no input: the output's own segment is this process's part
  gloo::AllgathervOptions b(g->ctx);
  b.setOutput(buf, std::vector<size_t>(seg.begin(), seg.end()));
  b.setTimeout(Ms(g->timeout_ms));
  gloo::allgatherv(b);
}

extern "C" {

void dpm_gloo_describe(const dpm_gloo *g, int q, char *buf, size_t cap) {
  int lo = q * g->local_ranks, hi = lo + g->local_ranks - 1;
  const char *addr = q >= 0 && q < (int)g->peers.size() ? g->peers[(size_t)q].show : "";
  if (lo == hi)
    snprintf(buf, cap, "process %d (job rank %d%s%s)", q, lo, *addr ? ", " : "", addr);
  else
    snprintf(buf, cap, "process %d (job ranks %d-%d%s%s)", q, lo, hi, *addr ? ", " : "",
             addr);
}

dpm_status dpm_gloo_create(const dpm_gloo_config *cfg, dpm_gloo **out, dpm_err *err) {
  if (!out) return dpm_errf(err, DPM_INVALID, "gloo: no output pointer");
  *out = nullptr;
  if (!cfg) return dpm_errf(err, DPM_INVALID, "gloo: no config");
  if (cfg->size < 1 || cfg->size > DPM_COMM_MAX_RANKS || cfg->rank < 0 ||
      cfg->rank >= cfg->size)
    return dpm_errf(err, DPM_INVALID, "gloo: process %d of %d: outside 0..%d", cfg->rank,
                    cfg->size, DPM_COMM_MAX_RANKS - 1);
  if (cfg->local_ranks < 1)
    return dpm_errf(err, DPM_INVALID, "gloo: %d ranks per process", cfg->local_ranks);
  if (cfg->timeout_ms <= 0)
    return dpm_errf(err, DPM_INVALID, "gloo: timeout %d ms must be positive",
                    cfg->timeout_ms);
  if (!cfg->prefix || !*cfg->prefix)
    return dpm_errf(err, DPM_INVALID,
                    "gloo rendezvous: no prefix (each formation needs its own)");
  if (!cfg->store) return dpm_errf(err, DPM_INVALID, "gloo rendezvous: no store");
  if (cfg->iface) {
    dpm_status s = check_iface(cfg->iface, err);
    if (s) return s;
  }

  dpm_gloo *g = new (std::nothrow) dpm_gloo;
  if (!g) return dpm_errf(err, DPM_NOMEM, "gloo: out of memory");
  g->rank = cfg->rank;
  g->size = cfg->size;
  g->local_ranks = cfg->local_ranks;
  g->timeout_ms = cfg->timeout_ms;
  char head[320];
  snprintf(head, sizeof head, "gloo rendezvous (prefix '%s', process %d of %d)",
           cfg->prefix, cfg->rank, cfg->size);
  NoSigpipe no_sigpipe;
  try {
    g->peers.resize((size_t)g->size);
    g->published.resize((size_t)g->size);
    memset(g->peers.data(), 0, g->peers.size() * sizeof(Addr));
    form(g, cfg);
  } catch (const StoreError &e) {
    // A store's own failure: say what it means for the formation.
    int q = e.key.empty() ? -1 : key_process(e.key);
    if (e.code == DPM_TIMEOUT && q >= 0 && q != g->rank) {
      char d[160];
      dpm_gloo_describe(g, q, d, sizeof d);
      dpm_errf(err, DPM_TIMEOUT, "%s: %s has not arrived: %s", head, d, e.what());
    } else if (e.code == DPM_EXISTS) {
      dpm_errf(err, DPM_EXISTS,
               "%s: the prefix was used before (%s); every formation needs a new prefix",
               head, e.what());
    } else {
      dpm_errf(err, e.code, "%s: %s", head, e.what());
    }
    dpm_gloo_destroy(g);
    return e.code;
  } catch (...) {
    dpm_status s = caught(g, head, err);
    dpm_gloo_destroy(g);
    return s;
  }
  *out = g;
  return DPM_OK;
}

dpm_status dpm_gloo_exchange(dpm_gloo *g, const char *op, const void *mine, size_t bytes,
                             void *all, dpm_err *err) {
  if (g->spent) return spent(g, op, err);
  if (bytes && (size_t)g->size > SIZE_MAX / bytes)
    return dpm_errf(err, DPM_INVALID, "%s: exchange of %zu bytes is too large", op,
                    bytes);
  if (g->xbytes && bytes != g->xbytes)
    return dpm_errf(err, DPM_INVALID,
                    "%s: exchange of %zu bytes, but this context's exchanges are %zu", op,
                    bytes, g->xbytes);
  char *base = static_cast<char *>(all);
  memcpy(base + (size_t)g->rank * bytes, mine, bytes);
  if (g->size == 1 || bytes == 0) return DPM_OK;
  std::vector<char> got((size_t)g->size, 0);
  got[(size_t)g->rank] = 1;
  auto slot = gloo::Slot::build(kExchangeSlotPrefix, 0);
  NoSigpipe no_sigpipe;
  try {
    if (!g->xbytes) { /* the first exchange: the buffers */
      g->xin.assign((size_t)g->size * bytes, 0);
      g->xout.assign(bytes, 0);
      g->xsend = g->ctx->createUnboundBuffer(g->xout.data(), bytes);
      g->xrecv.resize((size_t)g->size);
      g->xposted.assign((size_t)g->size, 0);
      for (int q = 0; q < g->size; q++)
        if (q != g->rank)
          g->xrecv[(size_t)q] =
              g->ctx->createUnboundBuffer(g->xin.data() + (size_t)q * bytes, bytes);
      g->xbytes = bytes;
    }
    for (int q = 0; q < g->size; q++)
      if (q != g->rank && !g->xposted[(size_t)q]) {
        g->xrecv[(size_t)q]->recv(q, slot);
        g->xposted[(size_t)q] = 1;
      }
    memcpy(g->xout.data(), mine, bytes);
    for (int q = 0; q < g->size; q++)
      if (q != g->rank) g->xsend->send(q, slot);
    auto until = Clock::now() + Ms(g->timeout_ms);
    bool late = false; // the deadline passed: only look at what arrived
    for (int q = 0; q < g->size; q++) {
      if (q == g->rank) continue;
      auto left = std::chrono::duration_cast<Ms>(until - Clock::now());
      try {
        g->xrecv[(size_t)q]->waitRecv(nullptr, late ? Ms(1) : std::max(left, Ms(1)));
        got[(size_t)q] = 1;
      } catch (const gloo::IoException &e) {
        if (!says_timeout(gloo_text(e.what()))) throw;
        late = true;
      }
    }
    if (late) {
      std::string missing;
      for (int q = 0; q < g->size; q++) {
        if (got[(size_t)q]) continue;
        char d[160];
        dpm_gloo_describe(g, q, d, sizeof d);
        missing += (missing.empty() ? "" : ", ") + std::string(d);
      }
      g->spent = true;
      g->spent_msg = std::string(op) + ": timed out after " +
                     std::to_string(g->timeout_ms) + " ms; not arrived: " + missing;
      return dpm_errf(err, DPM_TIMEOUT, "%s", g->spent_msg.c_str());
    }
    for (int q = 0; q < g->size; q++) {
      if (q == g->rank) continue;
      memcpy(base + (size_t)q * bytes, g->xin.data() + (size_t)q * bytes, bytes);
      g->xposted[(size_t)q] = 0;
    }
    /* the next call's receives; a peer that is done with the group may have
     * closed its end already: that is the next call's failure, if any */
    for (int q = 0; kPrepost && q < g->size; q++) {
      if (q == g->rank) continue;
      try {
        g->xrecv[(size_t)q]->recv(q, slot);
        g->xposted[(size_t)q] = 1;
      } catch (const std::exception &) {
      }
    }
    for (int q = 0; q < g->size; q++) {
      if (q == g->rank) continue;
      auto left = std::chrono::duration_cast<Ms>(until - Clock::now());
      g->xsend->waitSend(nullptr, std::max(left, Ms(1)));
    }
  } catch (...) {
    return caught(g, op, err);
  }
  return DPM_OK;
}

dpm_status dpm_gloo_allreduce(dpm_gloo *g, const char *op, dpm_comm_dtype t, void *buf,
                              size_t count, dpm_err *err) {
  if (g->spent) return spent(g, op, err);
  if ((unsigned)t >= DPM_COMM_DTYPE_COUNT)
    return dpm_errf(err, DPM_INVALID, "%s: element type %d", op, (int)t);
  if (count > SIZE_MAX / dpm_comm_dtype_size(t))
    return dpm_errf(err, DPM_INVALID, "%s: count %zu is too large", op, count);
  if (count && !buf) return dpm_errf(err, DPM_INVALID, "%s: no buffer", op);
  if (g->size == 1 || count == 0) return DPM_OK;
  NoSigpipe no_sigpipe;
  try {
    if (t == DPM_COMM_F64)
      ring_sum(g, static_cast<double *>(buf), count);
    else
      ring_sum(g, static_cast<float *>(buf), count);
  } catch (...) {
    // The ring receives from the next process and sends to the previous.
    char a[160], b[160];
    dpm_gloo_describe(g, (g->rank + 1) % g->size, a, sizeof a);
    dpm_gloo_describe(g, (g->rank + g->size - 1) % g->size, b, sizeof b);
    std::string ring = a;
    if (g->size > 2) ring += " or " + std::string(b);
    return caught(g, op, err, ring);
  }
  return DPM_OK;
}

dpm_status dpm_gloo_allreduce_bf16(dpm_gloo *g, const char *op, float *buf, size_t count,
                                   dpm_err *err) {
  if (g->spent) return spent(g, op, err);
  if (count > SIZE_MAX / sizeof(float) / 2)
    return dpm_errf(err, DPM_INVALID, "%s: count %zu is too large", op, count);
  if (count && !buf) return dpm_errf(err, DPM_INVALID, "%s: no buffer", op);
  if (g->size == 1 || count == 0) return DPM_OK;
  NoSigpipe no_sigpipe;
  try {
    bf16_sum(g, buf, count);
  } catch (...) {
    return caught(g, op, err); // every process talks to every other one
  }
  return DPM_OK;
}

dpm_status dpm_gloo_broadcast(dpm_gloo *g, const char *op, int root, void *buf,
                              size_t bytes, dpm_err *err) {
  if (g->spent) return spent(g, op, err);
  if (root < 0 || root >= g->size)
    return dpm_errf(err, DPM_INVALID, "%s: root process %d outside 0..%d", op, root,
                    g->size - 1);
  if (bytes && !buf) return dpm_errf(err, DPM_INVALID, "%s: no buffer", op);
  if (g->size == 1 || bytes == 0) return DPM_OK;
  NoSigpipe no_sigpipe;
  try {
    gloo::BroadcastOptions o(g->ctx);
    o.setOutput(static_cast<uint8_t *>(buf), bytes);
    o.setRoot(root);
    o.setTimeout(Ms(g->timeout_ms));
    gloo::broadcast(o);
  } catch (...) {
    return caught(g, op, err);
  }
  return DPM_OK;
}

dpm_status dpm_gloo_barrier(dpm_gloo *g, const char *op, dpm_err *err) {
  if (g->spent) return spent(g, op, err);
  if (g->size == 1) return DPM_OK;
  NoSigpipe no_sigpipe;
  try {
    gloo::BarrierOptions o(g->ctx);
    o.setTimeout(Ms(g->timeout_ms));
    gloo::barrier(o);
  } catch (...) {
    return caught(g, op, err);
  }
  return DPM_OK;
}

void dpm_gloo_destroy(dpm_gloo *g) {
  if (!g) return;
  try {
    g->xsend.reset(); /* a pending receive is let go of first (kPrepost) */
    g->xrecv.clear();
    g->ctx.reset();
    g->dev.reset();
  } catch (...) {
    // a destructor that throws: nothing more to close
  }
  delete g;
}

} // extern "C"
