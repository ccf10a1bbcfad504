// The peer baseline of bench/net: dmlc/ps-lite's KVWorker/KVServer driven with the workload
// of ps-net-bench (closed loop, Q requests of B unique keys in flight, rows of dim D), so
// Ember's figures have a yardstick measured on the same machine in the same minute.
// ps-lite is C++ with no C API: this is the one reason this file is C++. It is built by
// build.sh against a checkout of ps-lite and is not part of Ember's build.
//
// Environment (besides ps-lite's DMLC_*): PB_OP pull|push, PB_DIM, PB_BATCH, PB_INFLIGHT,
// PB_KEYSPACE, PB_SECS, PB_WARMUP. Prints one line in ps-net-bench's column layout.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "ps/ps.h"

namespace {

long env_int(const char *name, long dflt) {
  const char *v = getenv(name);
  return v && *v ? strtol(v, nullptr, 10) : dflt;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Rows created at 0.01 on first touch; SGD with lr 0.01 on push; copy on pull: the same work
// per key as an Ember SGD table with rows in the hot tier.
struct Rows {
  size_t dim;
  std::unordered_map<ps::Key, std::vector<float>> rows;
  void operator()(const ps::KVMeta &meta, const ps::KVPairs<float> &req, ps::KVServer<float> *srv) {
    size_t n = req.keys.size();
    ps::KVPairs<float> res;
    if (meta.pull) {
      res.keys = req.keys;
      res.vals.resize(n * dim);
    }
    for (size_t i = 0; i < n; i++) {
      auto it = rows.find(req.keys[i]);
      if (it == rows.end()) it = rows.emplace(req.keys[i], std::vector<float>(dim, 0.01f)).first;
      float *r = it->second.data();
      if (meta.push)
        for (size_t d = 0; d < dim; d++) r[d] -= 0.01f * req.vals[i * dim + d];
      if (meta.pull) memcpy(&res.vals[i * dim], r, dim * sizeof(float));
    }
    srv->Response(meta, res);
  }
};

void run_worker() {
  const std::string op = getenv("PB_OP") ? getenv("PB_OP") : "pull";
  const size_t dim = env_int("PB_DIM", 16), batch = env_int("PB_BATCH", 4096);
  const size_t q = env_int("PB_INFLIGHT", 1), space = env_int("PB_KEYSPACE", 262144);
  const double secs = env_int("PB_SECS", 2), warm = env_int("PB_WARMUP_MS", 500) / 1000.0;
  // ps-lite splits the whole 64-bit key range evenly over the servers: spread the key space
  // over it so every server gets its share, as hashing does for Ember.
  const ps::Key stride = ps::kMaxKey / space;
  ps::KVWorker<float> kv(0, 0);
  std::mt19937_64 rng(1);
  std::vector<std::vector<ps::Key>> batches(64);
  for (auto &b : batches) {
    std::vector<ps::Key> ks;
    while (ks.size() < batch) {
      for (size_t i = ks.size(); i < batch; i++) ks.push_back((rng() % space) * stride);
      std::sort(ks.begin(), ks.end());
      ks.erase(std::unique(ks.begin(), ks.end()), ks.end()); // ps-lite needs unique sorted keys
    }
    b = ks;
  }
  std::vector<float> grads(batch * dim, 0.001f);
  {  // create every row, as ps-net-bench pre-pushes its key space
    std::vector<ps::Key> all;
    for (size_t k = 0; k < space; k++) all.push_back(k * stride);
    std::vector<float> g(all.size() * dim, 0.0f);
    kv.Wait(kv.Push(all, g));
  }
  std::vector<std::vector<float>> outs(q);
  struct Flight { int ts; double t0; };
  std::deque<Flight> fl;
  std::vector<double> lat;
  size_t next = 0, done_keys = 0;
  auto issue = [&](size_t slot) {
    const auto &ks = batches[next++ % batches.size()];
    int ts = op == "push" ? kv.Push(ks, std::vector<float>(grads.begin(), grads.begin() + ks.size() * dim))
                          : kv.Pull(ks, &outs[slot]);
    fl.push_back({ts, now_s()});
  };
  for (size_t i = 0; i < q; i++) issue(i);
  double start = now_s(), measure_from = start + warm, end = measure_from + secs;
  size_t slot = 0;
  double t;
  while ((t = now_s()) < end) {
    Flight f = fl.front();
    fl.pop_front();
    kv.Wait(f.ts);
    double t1 = now_s();
    if (f.t0 >= measure_from) {
      lat.push_back(t1 - f.t0);
      done_keys += batch;
    }
    issue(slot++ % q);
  }
  while (!fl.empty()) {
    kv.Wait(fl.front().ts);
    fl.pop_front();
  }
  std::sort(lat.begin(), lat.end());
  auto pct = [&](double p) { return lat.empty() ? 0.0 : lat[std::min(lat.size() - 1, (size_t)(p * lat.size()))] * 1e6; };
  double span = end - measure_from, mk = done_keys / span / 1e6;
  printf("pslite %-5s %4zu %4d %4zu %12.3f %10.1f %10.1f %10.1f\n", op.c_str(), dim,
         ps::NumServers(), q, mk, mk * (8 + 4.0 * dim), pct(0.5), pct(0.99));
  fflush(stdout);
}

}  // namespace

int main() {
  ps::Start(0);
  if (ps::IsServer()) {
    auto *srv = new ps::KVServer<float>(0);
    Rows rows{(size_t)env_int("PB_DIM", 16), {}};
    srv->set_request_handle(rows);
    ps::Finalize(0, true);
    delete srv;
    return 0;
  }
  if (ps::IsWorker()) run_worker();
  ps::Finalize(0, true);
  return 0;
}
