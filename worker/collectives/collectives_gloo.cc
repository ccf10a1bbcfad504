/* collectives_gloo.cc: ps_collectives' CPU implementation, a thin C++ shim over Gloo
 * (Debian's libgloo-dev, the library PyTorch's ProcessGroupGloo uses for CPU tensors).
 *
 * Rendezvous: a gloo::rendezvous::Store subclass forwards set/get/wait to the caller's
 * ps_rendezvous callbacks (the coordinator in shard 0, or a test store), wrapped in Gloo's
 * PrefixStore so several groups can share one store. Transport: Gloo's TCP device bound to
 * `host`; connectFullMesh then opens one pair per peer.
 *
 * Algorithms are Gloo's own (gloo::allreduce, gloo::broadcast, gloo::barrier); nothing here
 * reduces or forwards data itself. Gloo's allreduce reduces each chunk on one rank and then
 * forwards the result, so every rank ends with bit-identical sums (tests check it).
 *
 * Gloo reports failures with C++ exceptions; they never cross into C: each entry point
 * catches them and returns a ps_status, the reason in err (create) or in the log (the ops,
 * which take no err). Timeout for connect and each
 * operation: 300 s, or EMBER_GLOO_TIMEOUT_S. */
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>

extern "C" {
#include "ps_collectives_int.h"
#include "ps_log.h"
}

namespace {

/* The caller's ps_rendezvous as a Gloo store. get() after wait() reuses the fetched value. */
class RdvStore : public gloo::rendezvous::Store {
 public:
  RdvStore(const ps_rendezvous *rdv, std::chrono::milliseconds timeout)
      : rdv_(*rdv), timeout_(timeout) {}

  void set(const std::string &key, const std::vector<char> &data) override {
    ps_status st = rdv_.set(rdv_.ctx, key.c_str(), data.data(), data.size());
    if (st != PS_OK)
      throw std::runtime_error("rendezvous set '" + key + "': " + ps_status_str(st));
  }

  std::vector<char> get(const std::string &key) override {
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      std::vector<char> v = std::move(it->second);
      cache_.erase(it);
      return v;
    }
    return fetch(key, timeout_);
  }

  void wait(const std::vector<std::string> &keys) override { wait(keys, timeout_); }

  void wait(const std::vector<std::string> &keys,
            const std::chrono::milliseconds &timeout) override {
    auto t = timeout.count() > 0 ? timeout : timeout_;
    for (const auto &k : keys)
      if (!cache_.count(k)) cache_[k] = fetch(k, t);
  }

 private:
  std::vector<char> fetch(const std::string &key, std::chrono::milliseconds t) {
    void *val = nullptr;
    size_t len = 0;
    uint32_t ms = t.count() > 0xFFFFFFF0LL ? 0xFFFFFFF0u : (uint32_t)t.count();
    ps_status st = rdv_.get(rdv_.ctx, key.c_str(), &val, &len, ms);
    if (st != PS_OK)
      throw std::runtime_error("rendezvous get '" + key + "': " + ps_status_str(st));
    std::vector<char> v((char *)val, (char *)val + len);
    free(val);
    return v;
  }

  ps_rendezvous rdv_;
  std::chrono::milliseconds timeout_;
  std::map<std::string, std::vector<char>> cache_;
};

struct GlooImpl {
  std::shared_ptr<gloo::transport::Device> dev;
  std::shared_ptr<gloo::rendezvous::Context> ctx;
};

GlooImpl *impl_of(ps_coll *c) { return static_cast<GlooImpl *>(c->impl); }

ps_status status_of(const std::exception &e) {
  std::string m = e.what();
  if (m.find("imeout") != std::string::npos || m.find("TIMEOUT") != std::string::npos)
    return PS_ERR_TIMEOUT;
  return PS_ERR_UNAVAILABLE;
}

/* The collective ops have no err to fill: they log here. */
ps_status fail(const char *what, const std::exception &e) {
  PS_ERROR("gloo %s: %s", what, e.what());
  return status_of(e);
}

ps_status gloo_allreduce(ps_coll *c, float *buf, size_t n) {
  if (n == 0) return PS_OK;
  if (!buf) return PS_ERR_INVALID;
  try {
    gloo::AllreduceOptions opts(impl_of(c)->ctx);
    opts.setOutput(buf, n); /* in place: no input means the output is the input */
    opts.setReduceFunction([](void *a, const void *b, const void *d, size_t k) {
      gloo::sum<float>(a, b, d, k);
    });
    gloo::allreduce(opts);
    return PS_OK;
  } catch (const std::exception &e) {
    return fail("allreduce", e);
  }
}

ps_status gloo_broadcast(ps_coll *c, void *buf, size_t bytes, int root) {
  if (root < 0 || root >= c->world) return PS_ERR_INVALID;
  if (bytes == 0) return PS_OK;
  if (!buf) return PS_ERR_INVALID;
  try {
    gloo::BroadcastOptions opts(impl_of(c)->ctx);
    opts.setOutput(static_cast<uint8_t *>(buf), bytes); /* the root's output is the source */
    opts.setRoot(root);
    gloo::broadcast(opts);
    return PS_OK;
  } catch (const std::exception &e) {
    return fail("broadcast", e);
  }
}

ps_status gloo_barrier(ps_coll *c) {
  try {
    gloo::BarrierOptions opts(impl_of(c)->ctx);
    gloo::barrier(opts);
    return PS_OK;
  } catch (const std::exception &e) {
    return fail("barrier", e);
  }
}

void gloo_destroy(ps_coll *c) {
  delete impl_of(c);
  free(c);
}

const ps_coll_ops kGlooOps = {gloo_allreduce, gloo_broadcast, gloo_barrier, gloo_destroy};

std::chrono::milliseconds gloo_timeout() {
  const char *s = getenv("EMBER_GLOO_TIMEOUT_S");
  long v = s ? strtol(s, nullptr, 10) : 0;
  return std::chrono::milliseconds((v > 0 ? v : 300) * 1000L);
}

}  // namespace

extern "C" ps_status ps_coll_create_gloo(const ps_rendezvous *rdv, const char *prefix, int rank,
                                         int world, const char *host, ps_coll **out,
                                         ps_error *err) {
  ps_status st = ps_coll_check_create(rdv, rank, world, out, err);
  if (st != PS_OK) return st;
  if (!prefix || !host) return ps_error_set(err, PS_ERR_INVALID, "gloo: no prefix or host");
  GlooImpl *impl = new (std::nothrow) GlooImpl();
  if (!impl) return ps_error_set(err, PS_ERR_NOMEM, "gloo: out of memory");
  try {
    auto timeout = gloo_timeout();
    gloo::transport::tcp::attr attr(host);
    impl->dev = gloo::transport::tcp::CreateDevice(attr);
    impl->ctx = std::make_shared<gloo::rendezvous::Context>(rank, world);
    impl->ctx->setTimeout(timeout);
    RdvStore store(rdv, timeout);
    gloo::rendezvous::PrefixStore pstore(std::string("gloo/") + prefix, store);
    impl->ctx->connectFullMesh(pstore, impl->dev);
  } catch (const std::exception &e) {
    delete impl;
    return ps_error_set(err, status_of(e), "gloo connect: %s", e.what());
  }
  ps_coll *c = ps_coll_new(&kGlooOps, PS_COLL_GLOO, rank, world, impl);
  if (!c) {
    delete impl;
    return ps_error_set(err, PS_ERR_NOMEM, "gloo: out of memory");
  }
  *out = c;
  return PS_OK;
}
