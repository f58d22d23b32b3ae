/* The chain all-reduce (src/comm/algo/chain_reduce.cc) outside braid, the
 * prototype its numbers came from: N processes fold each chunk of their
 * input in rank order into a shared slot (rank 0 copies, the others add),
 * then every process copies the slot out. K slots; a process adds chunk
 * k+W before it copies out chunk k. Waits spin SPIN pauses, then sleep on a
 * futex.
 *
 *   gcc -O3 -march=native bench/micro/chain_allreduce.c -o /tmp/chain
 *   chrt -f 10 /tmp/chain N MIB CHUNK_KIB SLOTS WINDOW ITERS [SPIN]
 *   chrt -f 10 /tmp/chain 4 16 512 16 8 60 100    # 4 processes, 16 MiB
 *
 * V=k in the environment: each process plays k consecutive ranks (k inputs
 * and outputs; N*k ranks in all), so V=4 with N=2 is the 8-rank work with
 * one process per core and only two cross-process hand-offs per chunk.
 * PIN=1 pins process i to core 2i/N (halves), PIN=2 to core i%2.
 * XCOUNT=1: each process prints how many of its hand-offs (adding to a slot
 * the previous process left) ran on another core than that process.
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/futex.h>
#include <sys/syscall.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
struct slot { _Atomic uint32_t adds; _Atomic uint32_t reads; _Atomic uint32_t waiters; int lastcpu; char pad[48]; };
static int N, SPIN;
static void waitfor(struct slot* s, _Atomic uint32_t* w, uint32_t want) {
  for (int i = 0; i < SPIN; ++i) { if (atomic_load(w) >= want) return; __builtin_ia32_pause(); }
  for (;;) {
    uint32_t v = atomic_load(w);
    if (v >= want) return;
    atomic_fetch_add(&s->waiters, 1);
    v = atomic_load(w);
    if (v < want) syscall(SYS_futex, w, FUTEX_WAIT, v, 0, 0, 0);
    atomic_fetch_sub(&s->waiters, 1);
  }
}
static void bump(struct slot* s, _Atomic uint32_t* w) {
  atomic_fetch_add(w, 1);
  if (atomic_load(&s->waiters)) syscall(SYS_futex, w, FUTEX_WAKE, 1 << 30, 0, 0, 0);
}
int main(int argc, char** argv) {
  if (argc < 7) { fprintf(stderr, "usage: chain N MIB CHUNK_KIB SLOTS WINDOW ITERS [SPIN]\n"); return 2; }
  N = atoi(argv[1]);
  size_t S = (size_t)atoi(argv[2]) << 20, C = (size_t)atoi(argv[3]) << 10;
  int K = atoi(argv[4]), W = atoi(argv[5]), iters = atoi(argv[6]);
  SPIN = argc > 7 ? atoi(argv[7]) : 2000;
  size_t cnt = S / 4, ccnt = C / 4, nch = (cnt + ccnt - 1) / ccnt;
  float* acc = mmap(0, (size_t)K * C, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  struct slot* sl = mmap(0, sizeof(struct slot) * K + 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  _Atomic uint32_t* bar = (void*)(sl + K);
  int r = 0;
  for (int i = 1; i < N; ++i) if (fork() == 0) { r = i; break; }
  {
    const char* pm = getenv("PIN");
    if (pm) {
      cpu_set_t cs;
      CPU_ZERO(&cs);
      CPU_SET(atoi(pm) == 1 ? (r * 2) / N : r % 2, &cs);
      sched_setaffinity(0, sizeof cs, &cs);
    }
  }
  const int V = getenv("V") ? atoi(getenv("V")) : 1;
  const int xcount = getenv("XCOUNT") ? atoi(getenv("XCOUNT")) : 0;
  long crossed = 0, handoffs = 0;
  if (V < 1 || V > 16) { fprintf(stderr, "V: 1 to 16\n"); return 2; }
  float* ins[16]; float* outs[16];
  for (int v = 0; v < V; ++v) {
    ins[v] = malloc(S); outs[v] = malloc(S);
    for (size_t i = 0; i < cnt; ++i) ins[v][i] = (float)(r * V + v + 1);
    memset(outs[v], 0, S);
  }
  float* in = ins[0]; float* out = outs[0];
  double t0 = 0;
  uint64_t use = 0; /* chunks processed so far across iterations (per slot use counting) */
  for (int it = -3; it < iters; ++it) {
    if (it == 0) { atomic_fetch_add(bar, 1); while (atomic_load(bar) < (uint32_t)N) sched_yield(); t0 = now(); }
    uint64_t base = use;
    size_t nout = 0;
    for (size_t c = 0; c <= nch; ++c) {
      if (c < nch) {
        uint64_t g = base + c; struct slot* s = &sl[g % K]; uint32_t u = (uint32_t)(g / K);
        float* a = acc + (g % K) * ccnt;
        size_t off = c * ccnt, len = cnt - off < ccnt ? cnt - off : ccnt;
        int v0 = 0;
        if (r == 0) { waitfor(s, &s->reads, u * N); waitfor(s, &s->adds, u * N); memcpy(a, in + off, len * 4); v0 = 1; }
        else waitfor(s, &s->adds, u * N + r);
        if (xcount) {
          int cpu = sched_getcpu();
          if (r != 0) { ++handoffs; crossed += cpu != s->lastcpu; }
          s->lastcpu = cpu;
        }
        for (int v = v0; v < V; ++v) { float* x = ins[v] + off; for (size_t i = 0; i < len; ++i) a[i] += x[i]; }
        bump(s, &s->adds);
      }
      while (nout < nch && (nout + W <= c || c == nch)) {
        uint64_t g = base + nout; struct slot* s = &sl[g % K]; uint32_t u = (uint32_t)(g / K);
        float* a = acc + (g % K) * ccnt;
        size_t off = nout * ccnt, len = cnt - off < ccnt ? cnt - off : ccnt;
        waitfor(s, &s->adds, (u + 1) * N);
        for (int v = 0; v < V; ++v) memcpy(outs[v] + off, a, len * 4);
        bump(s, &s->reads);
        ++nout;
      }
    }
    use += nch;
  }
  double t = (now() - t0) / iters;
  if (xcount) fprintf(stderr, "process %d: %ld of %ld hand-offs crossed cores\n", r, crossed, handoffs);
  if (r == 0) {
    const int R = N * V;
    float want = (float)(R * (R + 1) / 2);
    size_t bad = 0; for (size_t i = 0; i < cnt; ++i) bad += out[i] != want;
    printf("n=%d x V=%d S=%zu MiB chunk=%zu KiB K=%d W=%d: %.0f us, busbw %.2f GB/s, wrong %zu\n", N, V, S >> 20, C >> 10, K, W, t * 1e6, S / t * 2 * (R - 1) / R / 1e9, bad);
  }
  if (r == 0) while (wait(NULL) > 0) {}
  return 0;
}
