/* Does striping one message over several TCP connections help on this
 * machine? Two processes exchange MIB bytes each way (both send at once, as
 * in an all-reduce step) over K loopback connections, stripe i of the
 * message on connection i, one thread per process driving non-blocking
 * sockets with poll() -- the way braid's TCP wire runs.
 *
 *   gcc -O2 bench/micro/tcp_streams.c -o /tmp/tcp_streams
 *   chrt -f 10 /tmp/tcp_streams MIB K ITERS      e.g. 64 1 20, 64 2 20, 64 4 20
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static void die(const char* what) {
  perror(what);
  exit(1);
}

/* Sends and receives n bytes on each of k sockets' stripes at once. */
static void exchange(int* fd, int k, const char* out, char* in, size_t n) {
  size_t per = n / k, sent[16] = {0}, got[16] = {0};
  struct pollfd p[16];
  for (;;) {
    int left = 0;
    for (int i = 0; i < k; ++i) {
      size_t len = i == k - 1 ? n - per * (k - 1) : per;
      p[i].fd = fd[i];
      p[i].events = (sent[i] < len ? POLLOUT : 0) | (got[i] < len ? POLLIN : 0);
      left |= p[i].events;
    }
    if (!left) return;
    if (poll(p, k, -1) < 0 && errno != EINTR) die("poll");
    for (int i = 0; i < k; ++i) {
      size_t len = i == k - 1 ? n - per * (k - 1) : per, off = per * i;
      if ((p[i].revents & POLLOUT) && sent[i] < len) {
        ssize_t w = send(fd[i], out + off + sent[i], len - sent[i], MSG_DONTWAIT);
        if (w > 0) sent[i] += w;
        else if (w < 0 && errno != EAGAIN) die("send");
      }
      if ((p[i].revents & POLLIN) && got[i] < len) {
        ssize_t r = recv(fd[i], in + off + got[i], len - got[i], MSG_DONTWAIT);
        if (r > 0) got[i] += r;
        else if (r == 0) { fprintf(stderr, "peer closed\n"); exit(1); }
        else if (errno != EAGAIN) die("recv");
      }
    }
  }
}

int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: tcp_streams MIB K ITERS\n");
    return 2;
  }
  size_t n = (size_t)atoi(argv[1]) << 20;
  int k = atoi(argv[2]), iters = atoi(argv[3]);
  if (k < 1 || k > 16) {
    fprintf(stderr, "K: 1 to 16\n");
    return 2;
  }
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t al = sizeof a;
  if (bind(lfd, (struct sockaddr*)&a, sizeof a) || listen(lfd, 16)) die("listen");
  getsockname(lfd, (struct sockaddr*)&a, &al);
  int fd[16], one = 1;
  pid_t child = fork();
  for (int i = 0; i < k; ++i) {
    if (child == 0) {
      fd[i] = socket(AF_INET, SOCK_STREAM, 0);
      if (connect(fd[i], (struct sockaddr*)&a, sizeof a)) die("connect");
    } else {
      fd[i] = accept(lfd, 0, 0);
      if (fd[i] < 0) die("accept");
    }
    setsockopt(fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd[i], F_SETFL, fcntl(fd[i], F_GETFL) | O_NONBLOCK);
  }
  char* out = malloc(n);
  char* in = malloc(n);
  memset(out, child == 0 ? 1 : 2, n);
  memset(in, 0, n);
  for (int w = 0; w < 3; ++w) exchange(fd, k, out, in, n);
  double t0 = now();
  for (int it = 0; it < iters; ++it) exchange(fd, k, out, in, n);
  double t = (now() - t0) / iters;
  if (in[n / 2] != (child == 0 ? 2 : 1)) fprintf(stderr, "wrong data\n");
  if (child != 0) {
    printf("%zu MiB each way over %d connection(s): %.0f us, %.2f GB/s per direction\n", n >> 20, k,
           t * 1e6, n / t / 1e9);
    wait(0);
  }
  return 0;
}
