/* The floor of a 2-rank small-message exchange: two processes, each writes
 * an 8-byte payload and a stamp into a 64-byte line of a rotating set of
 * 32 boxes (as braid's shm fast boxes do), then polls the peer's box for
 * the same stamp. No library code in the way, so the time per round is
 * what the cache-line transfers cost; compare it with a 2-rank 8 B
 * all_reduce to see the software overhead of a call.
 *
 *   gcc -O2 -mclflushopt -mclwb bench/micro/exchange_floor.c -o /tmp/xfloor
 *   chrt -f 10 /tmp/xfloor MODE [ITERS]
 *
 * MODE 0: plain stores (braid's protocol, minus its fences).
 *      1: the writer also CLWBs the line after the stamp.
 *      2: the reader CLFLUSHOPTs the line after reading it.
 *      3: both 1 and 2.
 * Prints ns per round (one message each way, concurrently).
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define NBOX 32
#define BOX 512

typedef struct {
  volatile uint64_t stamp;
  uint32_t len, pad;
  char sig[40];
  double data;
} box_t;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: exchange_floor MODE [ITERS]   (MODE 0..3)\n");
    return 2;
  }
  const int mode = atoi(argv[1]);
  const long iters = argc > 2 ? atol(argv[2]) : 2000000;
  if (mode < 0 || mode > 3 || iters < 10) {
    fprintf(stderr, "need MODE in 0..3 and ITERS >= 10\n");
    return 2;
  }
  char* m = mmap(0, 2 * NBOX * BOX, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return perror("mmap"), 1;
  const pid_t child = fork();
  if (child < 0) return perror("fork"), 1;
  const int me = child == 0;
  char *out = m + me * NBOX * BOX, *in = m + (1 - me) * NBOX * BOX;
  double acc = 0, t0 = 0;
  for (long k = 1; k <= iters; k++) {
    if (k == iters / 10) t0 = now();  /* the first tenth warms up */
    box_t* o = (box_t*)(out + (k % NBOX) * BOX);
    o->data = 1.0;
    o->len = 8;
    __atomic_store_n(&o->stamp, k, __ATOMIC_RELEASE);
    if (mode & 1) _mm_clwb(o);
    box_t* i = (box_t*)(in + (k % NBOX) * BOX);
    while (__atomic_load_n(&i->stamp, __ATOMIC_ACQUIRE) != (uint64_t)k) _mm_pause();
    acc += i->data;
    if (mode & 2) _mm_clflushopt(i);
  }
  const double t = now() - t0;
  if (me == 0) {
    printf("mode %d: %.1f ns per round\n", mode, t / (iters - iters / 10) * 1e9);
    wait(0);
  }
  return acc < 0;
}
