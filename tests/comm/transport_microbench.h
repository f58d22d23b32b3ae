// Transport microbenchmark (run with
//   transport_test --gtest_also_run_disabled_tests --gtest_filter='*Microbenchmark*'
// ): two ranks, for shm and tcp: 8-byte ping-pong, 64 MiB uni- and
// bidirectional bandwidth, recv-reduce throughput, and a 2-rank f32
// all-reduce (reduce-scatter + all-gather straight on the transport).
// BENCH_MODES="auto,tcp" and BENCH_BYTES override what runs.
#pragma once

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "support/multiproc.h"
#include "transport_util.h"

namespace braid::comm::tutil {

inline double bench_time(Transport& t, Store& store, int rank, const std::string& tag, int iters,
                         const std::function<void(int)>& body) {
  // Align both ranks, then time `iters` runs of body.
  uint64_t x = 0, y = 0;
  Request s, r;
  send_recv_pair(1 - rank, 1 - rank, sig_of(CollOp::kBarrier, 1u << 30, 0, 8), &x, &y, s, r);
  t.post(&s);
  t.post(&r);
  drive(t, {&s, &r});
  uint64_t t0 = now_ns();
  for (int i = 0; i < iters; ++i) body(i);
  return double(now_ns() - t0) * 1e-9;
}

inline void run_microbenchmark() {
  std::string modes = env_str("BENCH_MODES").value_or("auto,tcp");
  size_t big = size_t(env_int("BENCH_BYTES", 64 << 20));
  std::stringstream ms(modes);
  std::string mode;
  while (std::getline(ms, mode, ',')) {
    testing::expect_all_pass(2, [&](int rank, int size, std::shared_ptr<Store> store) {
      auto t = make(rank, size, *store, mode);
      const int peer = 1 - rank;
      auto report = [&](const char* what, double v, const char* unit) {
        if (rank == 0) std::printf("  %-5s %-40s %10.3f %s\n", t->kind_to(1).c_str(), what, v, unit);
        std::fflush(stdout);
      };
      // Ping-pong, 8 bytes.
      uint64_t a = 1, b = 0;
      Request s, r;
      s.kind = Request::Kind::kSend;
      s.peer = peer;
      s.src = &a;
      r.kind = Request::Kind::kRecv;
      r.peer = peer;
      r.dst = &b;
      auto ping = [&](int i) {
        s.sig = r.sig = sig_of(CollOp::kSend, uint64_t(i), 1, 8);
        if (rank == 0) {
          t->post(&s);
          t->post(&r);
        } else {
          t->post(&r);
          drive(*t, {&r});
          t->post(&s);
        }
        drive(*t, {&s, &r});
      };
      for (int i = 0; i < 2000; ++i) ping(i);
      const int n = 20000;
      double sec = bench_time(*t, *store, rank, "pp", n, ping);
      report("ping-pong 8 B round trip", sec / n * 1e6, "us");

      std::vector<float> out(big / 4, 1.f), in(big / 4, 0.f), acc(big / 4, 2.f);
      const int reps = 8;
      auto uni = [&](int i) {
        Request x;
        x.kind = rank == 0 ? Request::Kind::kSend : Request::Kind::kRecv;
        x.peer = peer;
        x.sig = sig_of(CollOp::kBroadcast, uint64_t(i), big, big);
        x.src = out.data();
        x.dst = in.data();
        t->post(&x);
        drive(*t, {&x});
      };
      uni(0);
      sec = bench_time(*t, *store, rank, "uni", reps, uni);
      report(("unidirectional " + std::to_string(big >> 20) + " MiB").c_str(), double(big) * reps / sec / 1e9,
             "GB/s");

      auto bidi = [&](int i) {
        Request x, y;
        x.kind = Request::Kind::kSend;
        x.peer = peer;
        x.sig = sig_of(CollOp::kAllToAll, uint64_t(i), big, big);
        x.src = out.data();
        y = x;
        y.kind = Request::Kind::kRecv;
        y.dst = in.data();
        t->post(&x);
        t->post(&y);
        drive(*t, {&x, &y});
      };
      bidi(0);
      sec = bench_time(*t, *store, rank, "bidi", reps, bidi);
      report(("bidirectional " + std::to_string(big >> 20) + " MiB (sum of both ways)").c_str(),
             2.0 * double(big) * reps / sec / 1e9, "GB/s");

      auto red = [&](int i) {
        Request x;
        x.kind = rank == 0 ? Request::Kind::kSend : Request::Kind::kRecvReduce;
        x.peer = peer;
        x.sig = sig_of(CollOp::kReduce, uint64_t(i), big / 4, big, DType::kF32);
        x.src = out.data();
        x.dst = in.data();
        x.acc = acc.data();
        x.dtype = DType::kF32;
        t->post(&x);
        drive(*t, {&x});
      };
      red(0);
      sec = bench_time(*t, *store, rank, "red", reps, red);
      report(("recv-reduce f32 sum " + std::to_string(big >> 20) + " MiB").c_str(), double(big) * reps / sec / 1e9,
             "GB/s");

      // 2-rank all-reduce: exchange halves with recv-reduce, then swap the
      // reduced halves back. busbw = algbw for two ranks.
      for (size_t bytes : {size_t(1) << 20, size_t(16) << 20, size_t(64) << 20}) {
        if (bytes > big) break;
        size_t cnt = bytes / 4, half = cnt / 2;
        float* buf = acc.data();
        size_t mine_off = rank == 0 ? 0 : half, mine_n = rank == 0 ? half : cnt - half;
        size_t other_off = rank == 0 ? half : 0, other_n = cnt - mine_n;
        auto ar = [&](int i) {
          Request x, y;
          x.kind = Request::Kind::kSend;
          x.peer = peer;
          x.sig = sig_of(CollOp::kAllReduce, uint64_t(i), cnt, other_n * 4, DType::kF32);
          x.src = buf + other_off;
          y.kind = Request::Kind::kRecvReduce;
          y.peer = peer;
          y.sig = sig_of(CollOp::kAllReduce, uint64_t(i), cnt, mine_n * 4, DType::kF32);
          y.dst = buf + mine_off;
          y.acc = buf + mine_off;
          y.dtype = DType::kF32;
          t->post(&x);
          t->post(&y);
          drive(*t, {&x, &y});
          Request u, v;
          u.kind = Request::Kind::kSend;
          u.peer = peer;
          u.sig = sig_of(CollOp::kAllReduce, uint64_t(i), cnt, mine_n * 4, DType::kF32);
          u.src = buf + mine_off;
          v.kind = Request::Kind::kRecv;
          v.peer = peer;
          v.sig = sig_of(CollOp::kAllReduce, uint64_t(i), cnt, other_n * 4, DType::kF32);
          v.dst = buf + other_off;
          t->post(&u);
          t->post(&v);
          drive(*t, {&u, &v});
        };
        ar(0);
        int r2 = bytes >= (16u << 20) ? 8 : 50;
        sec = bench_time(*t, *store, rank, "ar", r2, ar);
        report(("all-reduce f32 " + std::to_string(bytes >> 20) + " MiB busbw").c_str(),
               double(bytes) * r2 / sec / 1e9, "GB/s");
      }
    }, std::chrono::seconds(300));
  }
}

}  // namespace braid::comm::tutil
