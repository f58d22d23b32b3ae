/* What the 8-ranks-on-2-cores all-reduce would cost without hand-offs: P
 * processes (one per core) each own a 1/P slice of the buffer and do ALL R
 * ranks' work on it, as if one process could read every rank's input: per
 * 512 KiB chunk, copy input 0 into a private slot, add inputs 1..R-1 (the
 * slot stays in this core's cache), copy the slot into outputs 0..R-1.
 * Every input is read from memory once and every output written once, the
 * same bytes a real R-rank all-reduce must move; only the hand-offs of the
 * partial sums between processes (and cores) are missing. The time printed
 * is per whole-buffer all-reduce (each process works on its slice at once).
 *
 *   gcc -O3 -march=native bench/micro/ideal_allreduce.c -o /tmp/ideal
 *   /tmp/ideal R MIB P STREAM CHUNK_KIB     e.g. /tmp/ideal 8 16 2 0 512
 * STREAM=1 writes the outputs with streaming stores.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void add(float* d, const float* a, size_t n) {
  for (size_t i = 0; i < n; i++) d[i] += a[i];
}

static void stream_out(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 64) {
    __m256i a = _mm256_load_si256((const __m256i*)(s + i));
    __m256i b = _mm256_load_si256((const __m256i*)(s + i + 32));
    _mm256_stream_si256((__m256i*)(d + i), a);
    _mm256_stream_si256((__m256i*)(d + i + 32), b);
  }
  _mm_sfence();
}

int main(int argc, char** argv) {
  if (argc < 6) {
    fprintf(stderr, "usage: ideal R MIB P STREAM CHUNK_KIB\n");
    return 2;
  }
  const int R = atoi(argv[1]), P = atoi(argv[3]), nt = atoi(argv[4]);
  const size_t n = (size_t)atoi(argv[2]) << 20, chunk = (size_t)atoi(argv[5]) << 10;
  const size_t per = n / P;
  if (R < 1 || R > 64 || P < 1 || chunk == 0 || per % chunk != 0) {
    fprintf(stderr, "need 1 <= R <= 64, P >= 1, and MIB/P a multiple of the chunk\n");
    return 2;
  }
  for (int p = 0; p < P; p++) {
    if (P > 1 && fork() != 0) continue;
    char *in[64], *out[64];
    for (int r = 0; r < R; r++) {
      in[r] = aligned_alloc(4096, per);
      out[r] = aligned_alloc(4096, per);
      memset(in[r], 0, per);
      memset(out[r], 1, per);
    }
    char* slot = aligned_alloc(4096, chunk);
    double best = 1e9, sum = 0;
    const int iters = 20;
    for (int i = 0; i < iters; i++) {
      double t0 = now();
      for (size_t o = 0; o < per; o += chunk) {
        memcpy(slot, in[0] + o, chunk);
        for (int r = 1; r < R; r++) add((float*)slot, (const float*)(in[r] + o), chunk / 4);
        for (int r = 0; r < R; r++) {
          if (nt) stream_out(out[r] + o, slot, chunk);
          else memcpy(out[r] + o, slot, chunk);
        }
      }
      double t = now() - t0;
      if (t < best) best = t;
      sum += t;
    }
    printf("process %d: %zu MiB slice x %d ranks (stream=%d): best %.2f ms, mean %.2f ms\n", p,
           per >> 20, R, nt, best * 1e3, sum / iters * 1e3);
    fflush(stdout);
    if (P > 1) _exit(0);
  }
  if (P > 1)
    while (wait(0) > 0) {
    }
  return 0;
}
