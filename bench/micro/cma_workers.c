/* The hand-off-free all-reduce schedule through the kernel: W worker
 * processes read every rank's input with process_vm_readv and write every
 * rank's output with process_vm_writev (worker w takes chunks w, w+W, ...);
 * the other processes sleep until the workers are done. Measures whether
 * cross-memory attach could replace the chain's hand-offs when ranks
 * outnumber cores (docs/PERFORMANCE.md: it cannot here, 20-24 ms for the
 * 8-rank 16 MiB case).
 *
 *   gcc -O3 -march=native bench/micro/cma_workers.c -o /tmp/cmaw
 *   chrt -f 10 /tmp/cmaw N MIB CHUNK_KIB ITERS [WORKERS]    e.g. 8 16 512 20 2
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
struct sh {
  _Atomic uint32_t go;
  _Atomic uint32_t done;
  uintptr_t in[64], out[64];
  pid_t pid[64];
  _Atomic int ready;
};
static void fwait(_Atomic uint32_t *w, uint32_t want) {
  for (;;) {
    uint32_t v = atomic_load(w);
    if (v >= want)
      return;
    syscall(SYS_futex, w, FUTEX_WAIT, v, 0, 0, 0);
  }
}
static void fwake(_Atomic uint32_t *w) {
  syscall(SYS_futex, w, FUTEX_WAKE, 1 << 30, 0, 0, 0);
}
int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: cmaw N MIB CHUNK_KIB ITERS [WORKERS]\n");
    return 2;
  }
  int N = atoi(argv[1]);
  size_t S = (size_t)atoi(argv[2]) << 20;
  size_t C = (size_t)atoi(argv[3]) << 10;
  int iters = atoi(argv[4]);
  int W = argc > 5 ? atoi(argv[5]) : 2;
  if (N < 2 || N > 64 || W < 1 || W > N || C == 0 || C % 4 != 0) {
    fprintf(stderr, "need 2 <= N <= 64, 1 <= WORKERS <= N, CHUNK_KIB > 0\n");
    return 2;
  }
  struct sh *s = mmap(0, sizeof *s, PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int r = 0;
  for (int i = 1; i < N; i++)
    if (fork() == 0) {
      r = i;
      break;
    }
  float *in = malloc(S);
  float *out = malloc(S);
  size_t cnt = S / 4;
  for (size_t i = 0; i < cnt; i++)
    in[i] = (float)(r + 1);
  memset(out, 0, S);
  s->in[r] = (uintptr_t)in;
  s->out[r] = (uintptr_t)out;
  s->pid[r] = getpid();
  atomic_fetch_add(&s->ready, 1);
  while (atomic_load(&s->ready) < N)
    sched_yield();
  float *slot = aligned_alloc(4096, C);
  float *tmp = aligned_alloc(4096, C);
  double t0 = 0;
  for (int it = -3; it < iters; it++) {
    if (it == 0)
      t0 = now();
    uint32_t gen = (uint32_t)(it + 4);
    if (r < W) {
      /* worker r handles chunks r, r+W, ... */
      for (size_t o = (size_t)r * C; o < S; o += (size_t)W * C) {
        size_t len = S - o < C ? S - o : C;
        for (int q = 0; q < N; q++) {
          float *dst = q == 0 ? slot : tmp;
          if (q == r) {
            memcpy(dst, (char *)in + o, len);
          } else {
            struct iovec l = {dst, len}, rm = {(void *)(s->in[q] + o), len};
            if (process_vm_readv(s->pid[q], &l, 1, &rm, 1, 0) != (ssize_t)len) {
              perror("readv");
              _exit(1);
            }
          }
          if (q > 0) {
            size_t n = len / 4;
            for (size_t i = 0; i < n; i++)
              slot[i] += tmp[i];
          }
        }
        for (int q = 0; q < N; q++) {
          if (q == r) {
            memcpy((char *)out + o, slot, len);
            continue;
          }
          struct iovec l = {slot, len}, rm = {(void *)(s->out[q] + o), len};
          if (process_vm_writev(s->pid[q], &l, 1, &rm, 1, 0) != (ssize_t)len) {
            perror("writev");
            _exit(1);
          }
        }
      }
      atomic_fetch_add(&s->done, 1);
      fwake(&s->done);
    }
    fwait(&s->done, gen * W);
  }
  double t = (now() - t0) / iters;
  if (r == 0) {
    float want = (float)(N * (N + 1) / 2);
    size_t bad = 0;
    for (size_t i = 0; i < cnt; i++)
      bad += out[i] != want;
    printf("N=%d S=%zu MiB chunk=%zu KiB workers=%d: %.0f us, busbw %.2f GB/s, "
           "wrong %zu\n",
           N, S >> 20, C >> 10, W, t * 1e6, S / t * 2 * (N - 1) / N / 1e9, bad);
    while (wait(0) > 0) {
    }
  }
  return 0;
}
