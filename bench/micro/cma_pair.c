/* Two processes, each doing what a 2-rank all_to_all with a single
 * cross-process copy does: process_vm_readv of the peer's block for us,
 * then a memcpy of our own block (docs/PERFORMANCE.md, section 1).
 *
 *   gcc -O2 bench/micro/cma_pair.c -o /tmp/cma_pair
 *   chrt -f 10 /tmp/cma_pair 4 300          # 4 MiB per rank, whole reads
 *   chrt -f 10 /tmp/cma_pair 4 300 1024     # ... in 1 MiB reads
 */
#define _GNU_SOURCE
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}
struct shared { _Atomic long arrive[2]; uintptr_t addr[2]; pid_t pid[2]; };
static void barrier(struct shared* s, int r, long gen) {
  atomic_store(&s->arrive[r], gen);
  while (atomic_load(&s->arrive[1 - r]) < gen) {}
}
int main(int argc, char** argv) {
  if (argc < 3) { fprintf(stderr, "usage: cma_pair MIB ITERS [PIECE_KIB]\n"); return 2; }
  size_t total = (size_t)atoi(argv[1]) << 20, half = total / 2;
  int iters = atoi(argv[2]);
  size_t piece = argc > 3 ? (size_t)atoi(argv[3]) << 10 : half;
  struct shared* s = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  int r = fork() == 0 ? 1 : 0, p = 1 - r;
  char* src = malloc(64 << 20);
  char* dst = malloc(64 << 20);
  memset(src, r + 1, 64 << 20);
  memset(dst, 0, 64 << 20);
  s->addr[r] = (uintptr_t)src;
  s->pid[r] = getpid();
  long gen = 1;
  barrier(s, r, gen++);
  double best = 1e9, sum = 0;
  for (int it = 0; it < iters; ++it) {
    barrier(s, r, gen++);
    double t0 = now();
    for (size_t off = 0; off < half; off += piece) {
      size_t n = half - off < piece ? half - off : piece;
      struct iovec l = {dst + p * half + off, n};
      struct iovec rm = {(void*)(s->addr[p] + r * half + off), n};
      if (process_vm_readv(s->pid[p], &l, 1, &rm, 1, 0) != (ssize_t)n) { perror("process_vm_readv"); exit(1); }
    }
    memcpy(dst + r * half, src + r * half, half);
    barrier(s, r, gen++);
    double t = now() - t0;
    if (it >= 3) { sum += t; if (t < best) best = t; }
  }
  if (r == 0) {
    double mean = sum / (iters - 3);
    printf("%zu MiB, reads of %zu KiB: mean %.1f us, best %.1f us, busbw %.2f GB/s\n", total >> 20,
           piece >> 10, mean * 1e6, best * 1e6, half / mean / 1e9);
    wait(NULL);
  }
  return 0;
}
