// Bare Gloo for bench/gloo.c: a context formed the plain way (FileStore
// under a PrefixStore, TCP device, connectFullMesh) and gloo::allreduce
// with the ring algorithm and gloo::sum<float>, nothing of dpm's around
// it. Plain C interface (bench/gloo_bare.h); every exception becomes -1
// and a message. One thread per context.
#include <stdio.h>

#include <chrono>
#include <exception>
#include <memory>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include "bench/gloo_bare.h"

struct bare_gloo {
  std::shared_ptr<gloo::transport::Device> dev;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
  std::chrono::milliseconds timeout;
};

extern "C" {

int bare_gloo_create(int rank, int size, const char *dir, const char *prefix,
                     const char *iface, int timeout_ms, bare_gloo **out, char *msg,
                     size_t cap) {
  *out = nullptr;
  try {
    auto g = std::make_unique<bare_gloo>();
    g->timeout = std::chrono::milliseconds(timeout_ms);
    gloo::rendezvous::FileStore files(dir);
    gloo::rendezvous::PrefixStore store(prefix, files);
    gloo::transport::tcp::attr attr;
    attr.iface = iface;
    g->dev = gloo::transport::tcp::CreateDevice(attr);
    g->ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
    g->ctx->setTimeout(g->timeout);
    g->ctx->connectFullMesh(store, g->dev);
    *out = g.release();
    return 0;
  } catch (const std::exception &e) {
    snprintf(msg, cap, "bare gloo: %s", e.what());
    return -1;
  }
}

int bare_gloo_allreduce(bare_gloo *g, float *buf, size_t count, char *msg, size_t cap) {
  try {
    gloo::AllreduceOptions o(g->ctx);
    o.setOutput(buf, count);
    o.setAlgorithm(gloo::AllreduceOptions::Algorithm::RING);
    o.setReduceFunction(static_cast<void (*)(void *, const void *, const void *, size_t)>(
        &gloo::sum<float>));
    o.setTimeout(g->timeout);
    gloo::allreduce(o);
    return 0;
  } catch (const std::exception &e) {
    snprintf(msg, cap, "bare gloo allreduce: %s", e.what());
    return -1;
  }
}

int bare_gloo_barrier(bare_gloo *g, char *msg, size_t cap) {
  try {
    gloo::BarrierOptions o(g->ctx);
    o.setTimeout(g->timeout);
    gloo::barrier(o);
    return 0;
  } catch (const std::exception &e) {
    snprintf(msg, cap, "bare gloo barrier: %s", e.what());
    return -1;
  }
}

void bare_gloo_destroy(bare_gloo *g) {
  try {
    delete g;
  } catch (...) {
  }
}

} // extern "C"
