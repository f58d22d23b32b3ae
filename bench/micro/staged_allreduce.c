/* A staged all-reduce between N processes on one host, outside braid: each
 * rank copies a chunk of its private input into shared memory, folds its
 * slice of the chunk from every rank's copy in place, and copies every
 * slice into its private output (docs/PERFORMANCE.md, "The oversubscription
 * bound"). Barriers spin briefly, then sleep on a futex.
 *
 *   gcc -O3 -march=native bench/micro/staged_allreduce.c -o /tmp/staged
 *   chrt -f 10 /tmp/staged N MIB CHUNK_KIB ITERS     # e.g. 4 16 1024 20
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
struct ctl { _Atomic uint32_t count; _Atomic uint32_t gen; };
static int N;
static void barrier(struct ctl* b) {
  uint32_t g = atomic_load(&b->gen);
  if (atomic_fetch_add(&b->count, 1) == (uint32_t)N - 1) {
    atomic_store(&b->count, 0);
    atomic_store(&b->gen, g + 1);
    syscall(SYS_futex, &b->gen, FUTEX_WAKE, 1 << 30, 0, 0, 0);
    return;
  }
  for (int i = 0; i < 100; ++i) { if (atomic_load(&b->gen) != g) return; }
  while (atomic_load(&b->gen) == g) syscall(SYS_futex, &b->gen, FUTEX_WAIT, g, 0, 0, 0);
}
int main(int argc, char** argv) {
  if (argc < 5) { fprintf(stderr, "usage: staged N MIB CHUNK_KIB ITERS\n"); return 2; }
  N = atoi(argv[1]);
  size_t S = (size_t)atoi(argv[2]) << 20, C = (size_t)atoi(argv[3]) << 10;
  int iters = atoi(argv[4]);
  size_t cnt = S / 4, ccnt = C / 4;
  float* stg = mmap(0, (size_t)N * 2 * C, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  struct ctl* b = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int r = 0;
  for (int i = 1; i < N; ++i) if (fork() == 0) { r = i; break; }
  float* in = malloc(S); float* out = malloc(S);
  for (size_t i = 0; i < cnt; ++i) in[i] = (float)(r + 1);
  memset(out, 0, S);
  double t0 = 0;
  for (int it = -3; it < iters; ++it) {
    if (it == 0) { barrier(b); t0 = now(); }
    for (size_t off = 0, ch = 0; off < cnt; off += ccnt, ++ch) {
      size_t len = cnt - off < ccnt ? cnt - off : ccnt;
      float* mine = stg + ((size_t)r * 2 + (ch & 1)) * ccnt;
      memcpy(mine, in + off, len * 4);
      barrier(b);
      size_t blo = len * r / N, bhi = len * (r + 1) / N;
      for (int k = 0; k < N; ++k) {
        if (k == r) continue;
        float* theirs = stg + ((size_t)k * 2 + (ch & 1)) * ccnt;
        for (size_t i = blo; i < bhi; ++i) mine[i] += theirs[i];
      }
      barrier(b);
      for (int k = 0; k < N; ++k) {
        size_t klo = len * k / N, khi = len * (k + 1) / N;
        float* theirs = stg + ((size_t)k * 2 + (ch & 1)) * ccnt;
        memcpy(out + off + klo, theirs + klo, (khi - klo) * 4);
      }
    }
  }
  barrier(b);
  double t = (now() - t0) / iters;
  if (r == 0) {
    float want = (float)(N * (N + 1) / 2);
    size_t bad = 0; for (size_t i = 0; i < cnt; ++i) bad += out[i] != want;
    printf("n=%d S=%zu MiB chunk=%zu KiB: %.0f us, busbw %.2f GB/s, wrong %zu\n", N, S >> 20, C >> 10, t * 1e6, S / t * 2 * (N - 1) / N / 1e9, bad);
  }
  if (r == 0) while (wait(NULL) > 0) {}
  return 0;
}
