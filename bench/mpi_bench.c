/* mpi_bench: times one MPI collective over a doubling range of sizes and
 * prints one JSON object per size with the same fields as `braid bench
 * --json`, so that bench/compare_mpi.sh can put the two side by side.
 *
 *   mpirun -n N mpi_bench --op all_reduce --min-bytes 8 --max-bytes 64M \
 *          [--iters 20] [--warmup 5]
 *
 * Conventions (nccl-tests'):
 *   bytes   the per-rank buffer that names the size: all_reduce, broadcast,
 *           reduce: the buffer; all_gather: the whole output; reduce_scatter:
 *           the whole input; all_to_all: the whole send buffer. Sizes that
 *           must split into N equal parts are rounded down to a multiple of
 *           N * 4 bytes; a size that rounds to 0 is skipped.
 *   count   bytes / 4 (f32 elements of that buffer).
 *   time_us the slowest rank's average time per iteration: every rank
 *           times `iters` back-to-back calls after `warmup` untimed calls
 *           and a barrier; rank 0 prints the MPI_MAX of the averages.
 *   algbw   bytes / time (GB/s, 1e9).
 *   busbw   algbw * 2(n-1)/n (all_reduce), * (n-1)/n (all_gather,
 *           reduce_scatter, all_to_all), * 1 (broadcast, reduce).
 *   wrong   elements of the last timed call's result that differ from the
 *           exact answer, summed over ranks. Inputs are small integers, so
 *           every f32 sum is exact and a wrong element is a real error.
 *
 * Outputs are out of place and are filled with a sentinel before the first
 * call, so a collective that never writes its result is counted wrong. */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum op { ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, BROADCAST, REDUCE, ALL_TO_ALL };
static const char* const op_names[] = {"all_reduce", "all_gather", "reduce_scatter",
                                       "broadcast", "reduce", "all_to_all"};
static const float kSentinel = -12345.0f;

static int parse_op(const char* s) {
  for (int i = 0; i < (int)(sizeof op_names / sizeof *op_names); ++i)
    if (strcmp(s, op_names[i]) == 0) return i;
  return -1;
}

/* "4096", "64K", "16M", "1G" (binary multiples). */
static long long parse_bytes(const char* s) {
  char* end = NULL;
  long long v = strtoll(s, &end, 10);
  if (end == s || v < 0) return -1;
  switch (*end) {
    case 'k': case 'K': v <<= 10; ++end; break;
    case 'm': case 'M': v <<= 20; ++end; break;
    case 'g': case 'G': v <<= 30; ++end; break;
    default: break;
  }
  if (*end == 'i' || *end == 'B') ++end; /* accept 16MiB / 16MB spellings */
  if (*end == 'B') ++end;
  return *end ? -1 : v;
}

/* Rank r's input element i: small integers, different per rank and per index,
 * so that misplaced blocks and missing contributions both show up. */
static float input_value(int rank, size_t i) { return (float)(rank + 1 + (int)(i % 13)); }

static void fill_input(float* p, size_t n, int rank) {
  for (size_t i = 0; i < n; ++i) p[i] = input_value(rank, i);
}

static void fill_sentinel(float* p, size_t n) {
  for (size_t i = 0; i < n; ++i) p[i] = kSentinel;
}

/* Sum over ranks of input_value(r, i). */
static float sum_value(int nranks, size_t i) {
  return (float)(nranks * (nranks + 1) / 2 + nranks * (int)(i % 13));
}

struct bufs {
  float* send;
  float* recv;
  size_t send_elems, recv_elems;
};

/* One call of the collective; `count` elements of the size-naming buffer. */
static void run_once(int op, const struct bufs* b, size_t count, int nranks) {
  switch (op) {
    case ALL_REDUCE:
      MPI_Allreduce(b->send, b->recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case ALL_GATHER:
      MPI_Allgather(b->send, (int)(count / nranks), MPI_FLOAT, b->recv, (int)(count / nranks),
                    MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case REDUCE_SCATTER:
      MPI_Reduce_scatter_block(b->send, b->recv, (int)(count / nranks), MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
      break;
    case BROADCAST:
      /* Root broadcasts from its input; the others receive into recv. */
      MPI_Bcast(b->recv, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
      break;
    case REDUCE:
      MPI_Reduce(b->send, b->recv, (int)count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
      break;
    case ALL_TO_ALL:
      MPI_Alltoall(b->send, (int)(count / nranks), MPI_FLOAT, b->recv, (int)(count / nranks),
                   MPI_FLOAT, MPI_COMM_WORLD);
      break;
  }
}

/* Prepares inputs and sentinel outputs for a call on `count` elements. */
static void prepare(int op, struct bufs* b, size_t count, int rank, int nranks) {
  size_t part = count / nranks;
  switch (op) {
    case ALL_REDUCE: case REDUCE:
      fill_input(b->send, count, rank);
      fill_sentinel(b->recv, count);
      break;
    case ALL_GATHER:
      fill_input(b->send, part, rank);
      fill_sentinel(b->recv, count);
      break;
    case REDUCE_SCATTER: case ALL_TO_ALL:
      fill_input(b->send, count, rank);
      fill_sentinel(b->recv, op == ALL_TO_ALL ? count : part);
      break;
    case BROADCAST:
      if (rank == 0) fill_input(b->recv, count, 0);
      else fill_sentinel(b->recv, count);
      break;
  }
}

/* Number of wrong elements in this rank's result. */
static long long check(int op, const struct bufs* b, size_t count, int rank, int nranks) {
  size_t part = count / nranks;
  long long wrong = 0;
  switch (op) {
    case ALL_REDUCE:
      for (size_t i = 0; i < count; ++i) wrong += b->recv[i] != sum_value(nranks, i);
      break;
    case REDUCE:
      if (rank == 0)
        for (size_t i = 0; i < count; ++i) wrong += b->recv[i] != sum_value(nranks, i);
      break;
    case ALL_GATHER: /* block r holds rank r's input elements 0..part-1 */
      for (size_t i = 0; i < count; ++i)
        wrong += b->recv[i] != input_value((int)(i / part), i % part);
      break;
    case REDUCE_SCATTER: /* rank r gets the sum of block r */
      for (size_t i = 0; i < part; ++i)
        wrong += b->recv[i] != sum_value(nranks, rank * part + i);
      break;
    case ALL_TO_ALL: /* block s holds block `rank` of rank s's input */
      for (size_t i = 0; i < count; ++i)
        wrong += b->recv[i] != input_value((int)(i / part), rank * part + i % part);
      break;
    case BROADCAST:
      for (size_t i = 0; i < count; ++i) wrong += b->recv[i] != input_value(0, i);
      break;
  }
  return wrong;
}

static double bus_factor(int op, int n) {
  switch (op) {
    case ALL_REDUCE: return 2.0 * (n - 1) / n;
    case ALL_GATHER: case REDUCE_SCATTER: case ALL_TO_ALL: return (double)(n - 1) / n;
    default: return 1.0;
  }
}

static void usage(void) {
  fprintf(stderr,
          "usage: mpi_bench --op {all_reduce|all_gather|reduce_scatter|broadcast|reduce|"
          "all_to_all}\n"
          "                 [--min-bytes B] [--max-bytes B] [--iters I] [--warmup W]\n"
          "                 [--dtype f32] [--json]\n");
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, nranks;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &nranks);

  int op = ALL_REDUCE, iters = 20, warmup = 5;
  long long min_bytes = 8, max_bytes = 64LL << 20;
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    int ok = 1;
    if (strcmp(a, "--json") == 0) continue; /* JSON is the only output */
    if (!v) ok = 0;
    else if (strcmp(a, "--op") == 0) ok = (op = parse_op(v)) >= 0;
    else if (strcmp(a, "--min-bytes") == 0) ok = (min_bytes = parse_bytes(v)) > 0;
    else if (strcmp(a, "--max-bytes") == 0) ok = (max_bytes = parse_bytes(v)) > 0;
    else if (strcmp(a, "--iters") == 0) ok = (iters = atoi(v)) > 0;
    else if (strcmp(a, "--warmup") == 0) ok = (warmup = atoi(v)) >= 0;
    else if (strcmp(a, "--dtype") == 0) ok = strcmp(v, "f32") == 0;
    else ok = 0;
    if (!ok) {
      if (rank == 0) {
        fprintf(stderr, "mpi_bench: bad argument '%s'%s%s\n", a, v ? " " : "", v ? v : "");
        usage();
      }
      MPI_Finalize();
      return 2;
    }
    ++i;
  }
  if (min_bytes > max_bytes || max_bytes > (1LL << 31)) {
    if (rank == 0) fprintf(stderr, "mpi_bench: need 0 < min-bytes <= max-bytes <= 2 GiB\n");
    MPI_Finalize();
    return 2;
  }

  /* One allocation for the largest size; every op's buffers fit in max_bytes. */
  struct bufs b;
  b.send_elems = b.recv_elems = (size_t)(max_bytes / 4) + 1;
  b.send = malloc(b.send_elems * sizeof(float));
  b.recv = malloc(b.recv_elems * sizeof(float));
  if (!b.send || !b.recv) {
    fprintf(stderr, "mpi_bench: rank %d: out of memory for %lld bytes\n", rank, max_bytes);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  memset(b.send, 0, b.send_elems * sizeof(float)); /* fault the pages in now */
  memset(b.recv, 0, b.recv_elems * sizeof(float));

  const int split = op == ALL_GATHER || op == REDUCE_SCATTER || op == ALL_TO_ALL;
  const long long quantum = split ? 4LL * nranks : 4;
  long long last = -1;
  for (long long want = min_bytes; want <= max_bytes; want *= 2) {
    long long bytes = want / quantum * quantum;
    if (bytes == 0 || bytes == last) continue;
    last = bytes;
    size_t count = (size_t)(bytes / 4);

    prepare(op, &b, count, rank, nranks);
    for (int it = 0; it < warmup; ++it) run_once(op, &b, count, nranks);
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; ++it) run_once(op, &b, count, nranks);
    double mine = (MPI_Wtime() - t0) / iters;

    double slowest = 0;
    long long wrong = check(op, &b, count, rank, nranks), wrong_all = 0;
    MPI_Reduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    MPI_Reduce(&wrong, &wrong_all, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      double algbw = (double)bytes / slowest / 1e9;
      printf("{\"op\":\"%s\",\"bytes\":%lld,\"count\":%zu,\"dtype\":\"f32\",\"time_us\":%.3f,"
             "\"algbw_gbs\":%.4f,\"busbw_gbs\":%.4f,\"wrong\":%lld}\n",
             op_names[op], bytes, count, slowest * 1e6, algbw, algbw * bus_factor(op, nranks),
             wrong_all);
      fflush(stdout);
    }
    if (want > max_bytes / 2) break; /* no overflow past the top */
  }

  free(b.send);
  free(b.recv);
  MPI_Finalize();
  return 0;
}
