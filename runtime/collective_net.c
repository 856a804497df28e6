/* collective_net.c: the full mesh of TCP connections between the processes of a multi-process run
 * on the CPU (collective_net.h), and the exchange of a group's posts over it. Every message is a
 * frame: a fixed header (kind, a per-connection sequence number, bytes per post, number of posts,
 * group size, sender) then the posts; a process sends all its posts of a collective to every other
 * process of the group and receives theirs at the same time (non-blocking sockets under one poll,
 * so two processes sending each other more than a socket buffer cannot wait on each other).
 * The header's sequence number and sizes catch processes that run different programs. A failure
 * sends an ABORT frame, with the reason, to the peers that can take one, and closes every
 * connection: the others fail at once rather than at their timeout. Knows nothing of the IR,
 * MLIR or Python. */
#define _GNU_SOURCE
#include "collective_net.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#include "../ir/status.h"

enum { FRAME_HELLO = 1, FRAME_DATA = 2, FRAME_ABORT = 3 };
#define MAGIC 0x6b6c6e31u /* "kln1" */
#define HDR 36            /* header bytes: magic, kind, seq (8), nbytes (8), nposts, group n, sender */
#define ABORT_MAX 400     /* bytes of an abort's reason that are read */

typedef struct {
  uint32_t kind;
  uint64_t seq;    /* frames of this kind sent on the connection before this one */
  uint64_t nbytes; /* bytes per post (an abort: of the reason) */
  uint32_t nposts; /* posts that follow (hello: the sender's number of processes) */
  uint32_t group;  /* ranks in the group */
  uint32_t sender; /* the sending process */
} header;

static pthread_mutex_t net_mu = PTHREAD_MUTEX_INITIALIZER; /* one exchange at a time; guards all below */
static int listen_fd = -1;
static int me = -1, nprocs;
static int *fds;                          /* per process, -1 for this one and for closed ones */
static uint64_t *sent_seq, *recv_seq;     /* data frames sent to / received from each process */
static double timeout_s = 300;
static char broken[320];                  /* why the connections are unusable; "" while they work */
static int connected_as = -1;             /* me while connected, else -1 (read without net_mu: a launch
                                             asks while an exchange may hold the lock for long) */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void put32(unsigned char *p, uint32_t v) {
  for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (24 - 8 * i));
}
static void put64(unsigned char *p, uint64_t v) {
  put32(p, (uint32_t)(v >> 32));
  put32(p + 4, (uint32_t)v);
}
static uint32_t get32(const unsigned char *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}
static uint64_t get64(const unsigned char *p) { return (uint64_t)get32(p) << 32 | get32(p + 4); }

static void encode(unsigned char *b, const header *h) {
  put32(b, MAGIC);
  put32(b + 4, h->kind);
  put64(b + 8, h->seq);
  put64(b + 16, h->nbytes);
  put32(b + 24, h->nposts);
  put32(b + 28, h->group);
  put32(b + 32, h->sender);
}

/* 0, or -1 when b is not a kiln frame header. */
static int decode(const unsigned char *b, header *h) {
  if (get32(b) != MAGIC) return -1;
  *h = (header){get32(b + 4), get64(b + 8), get64(b + 16), get32(b + 24), get32(b + 28), get32(b + 32)};
  return 0;
}

/* Sends or receives all len bytes on a blocking-style loop until the deadline. 0, or -1. */
static int io_all(int fd, void *buf, size_t len, int sending, double deadline) {
  size_t done = 0;
  while (done < len) {
    double left = deadline - now_s();
    struct pollfd p = {fd, (short)(sending ? POLLOUT : POLLIN), 0};
    if (left <= 0 || poll(&p, 1, (int)(left * 1000) + 1) <= 0) return -1;
    ssize_t k = sending ? send(fd, (char *)buf + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT)
                        : recv(fd, (char *)buf + done, len - done, MSG_DONTWAIT);
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return -1;
    if (k > 0) done += (size_t)k;
  }
  return 0;
}

static void set_socket_options(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void close_all_locked(void) {
  for (int p = 0; fds && p < nprocs; p++)
    if (fds[p] >= 0) close(fds[p]);
  if (listen_fd >= 0) close(listen_fd);
  listen_fd = -1;
  free(fds);
  free(sent_seq);
  free(recv_seq);
  fds = NULL;
  sent_seq = recv_seq = NULL;
  me = -1;
  __atomic_store_n(&connected_as, -1, __ATOMIC_RELEASE);
  nprocs = 0;
}

int kl_net_listen(const char *host, char *err, size_t errlen) {
  struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
  int rc = getaddrinfo(host && *host ? host : NULL, "0", &hints, &ai);
  if (rc) return kl_error(err, errlen, KL_ERR_INTERNAL, "kiln.distributed: cannot listen on %s: %s", host, gai_strerror(rc));
  int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
  if (fd >= 0) setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (fd < 0 || bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, 128)) {
    int e = errno;
    if (fd >= 0) close(fd);
    freeaddrinfo(ai);
    return kl_error(err, errlen, KL_ERR_INTERNAL, "kiln.distributed: cannot listen on %s for collectives: %s",
                    host && *host ? host : "*", strerror(e));
  }
  freeaddrinfo(ai);
  struct sockaddr_storage sa;
  socklen_t sl = sizeof sa;
  getsockname(fd, (struct sockaddr *)&sa, &sl);
  int port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port : ((struct sockaddr_in *)&sa)->sin_port);
  pthread_mutex_lock(&net_mu);
  if (listen_fd >= 0) close(listen_fd);
  listen_fd = fd;
  pthread_mutex_unlock(&net_mu);
  return port;
}

/* A connection to host:port, retried until the deadline; -1 when none was made. */
static int dial(const char *host, int port, double deadline) {
  char ps[16];
  snprintf(ps, sizeof ps, "%d", port);
  for (;;) {
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    if (getaddrinfo(host, ps, &hints, &ai) == 0) {
      for (struct addrinfo *a = ai; a; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
          freeaddrinfo(ai);
          return fd;
        }
        close(fd);
      }
      freeaddrinfo(ai);
    }
    if (now_s() >= deadline) return -1;
    usleep(20000);
  }
}

int kl_net_connect(int my_id, int n, const char *const *hosts, const int *ports, double timeout,
                   double exchange_timeout, char *err, size_t errlen) {
  pthread_mutex_lock(&net_mu);
  double deadline = now_s() + timeout;
  int rc = 0, lfd = listen_fd;
  listen_fd = -1;
  for (int p = 0; fds && p < nprocs; p++)
    if (fds[p] >= 0) close(fds[p]);
  free(fds);
  free(sent_seq);
  free(recv_seq);
  fds = malloc(sizeof(int) * (size_t)n);
  sent_seq = calloc((size_t)n, sizeof *sent_seq);
  recv_seq = calloc((size_t)n, sizeof *recv_seq);
  me = my_id;
  nprocs = n;
  timeout_s = exchange_timeout;
  broken[0] = 0;
  if (!fds || !sent_seq || !recv_seq) {
    rc = kl_error(err, errlen, KL_ERR_NOMEM, "kiln.distributed: out of host memory connecting the processes");
    goto out;
  }
  for (int p = 0; p < n; p++) fds[p] = -1;
  unsigned char b[HDR];
  for (int p = 0; p < my_id && !rc; p++) { /* to the processes of lower id */
    fds[p] = dial(hosts[p], ports[p], deadline);
    encode(b, &(header){FRAME_HELLO, 0, 0, (uint32_t)n, 0, (uint32_t)my_id});
    if (fds[p] < 0 || io_all(fds[p], b, HDR, 1, deadline))
      rc = kl_error(err, errlen, KL_ERR_INTERNAL, "kiln.distributed: process %d could not connect to process %d at "
                    "%s:%d for collectives within %g s", my_id, p, hosts[p], ports[p], timeout);
  }
  for (int k = my_id + 1; k < n && !rc; k++) { /* from those of higher id, in any order */
    struct pollfd pl = {lfd, POLLIN, 0};
    double left = deadline - now_s();
    int fd = lfd >= 0 && left > 0 && poll(&pl, 1, (int)(left * 1000) + 1) > 0 ? accept(lfd, NULL, NULL) : -1;
    header h;
    if (fd >= 0) fcntl(fd, F_SETFD, FD_CLOEXEC);
    if (fd < 0 || io_all(fd, b, HDR, 0, deadline) || decode(b, &h) || h.kind != FRAME_HELLO || h.nposts != (uint32_t)n ||
        h.sender <= (uint32_t)my_id || h.sender >= (uint32_t)n || fds[h.sender] >= 0) {
      if (fd >= 0) close(fd);
      rc = kl_error(err, errlen, KL_ERR_INTERNAL, "kiln.distributed: process %d: %s", my_id,
                    fd < 0 ? "not every process of higher id connected for collectives in time"
                           : "a connection for collectives that is not from a process of this run");
      break;
    }
    fds[h.sender] = fd;
  }
  for (int p = 0; p < n && !rc; p++)
    if (p != my_id) set_socket_options(fds[p]);
out:
  if (lfd >= 0) close(lfd);
  if (rc) close_all_locked();
  else __atomic_store_n(&connected_as, my_id, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&net_mu);
  return rc;
}

void kl_net_close(void) {
  pthread_mutex_lock(&net_mu);
  close_all_locked();
  pthread_mutex_unlock(&net_mu);
}

int kl_net_process(void) { return __atomic_load_n(&connected_as, __ATOMIC_ACQUIRE); }

int kl_net_span_process(int size, const int *procs, int n, const char *what, char *err, size_t errlen) {
  int me = kl_net_process();
  if (me < 0)
    return kl_error(err, errlen, KL_ERR_VALUE, "a computation over the devices of several processes needs the processes "
                    "connected: call kiln.distributed.initialize() first");
  int local = 0;
  for (int r = 0; r < size; r++) local += procs[r] == me;
  if (local != n)
    return kl_error(err, errlen, KL_ERR_VALUE, "an SPMD launch of %d %s, but its group gives this process (%d) %d", n,
                    what, me, local);
  return me;
}

/* ---- the exchange ---- */

typedef struct {
  int proc;             /* the peer process */
  int *ranks, nranks;   /* its ranks in the group, ascending (into the exchange's one array) */
  unsigned char shdr[HDR], rhdr[HDR];
  size_t sent, stotal;  /* bytes of this process's frame sent, and in all */
  size_t got, rtotal;   /* bytes of the peer's frame received, and in all (known after its header) */
  header h;             /* the peer's header, once received */
  char why[ABORT_MAX + 1]; /* an abort's reason */
} peer;

/* Sends the frame's next bytes: the header, then this process's posts in rank order. */
static ssize_t send_some(peer *q, const int *mine, int nmine, const void **posts, size_t nbytes) {
  const void *at;
  size_t len;
  if (q->sent < HDR) {
    at = q->shdr + q->sent;
    len = HDR - q->sent;
  } else {
    size_t k = q->sent - HDR, j = k / nbytes;
    at = (const char *)posts[mine[j]] + k % nbytes;
    len = nbytes - k % nbytes;
    (void)nmine;
  }
  return send(fds[q->proc], at, len, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Receives the frame's next bytes into the header, the rank's slot of recv, or the abort reason. */
static ssize_t recv_some(peer *q, const int *slot, char *rbuf, size_t nbytes) {
  void *at;
  size_t len;
  if (q->got < HDR) {
    at = q->rhdr + q->got;
    len = HDR - q->got;
  } else if (q->h.kind == FRAME_ABORT) {
    at = q->why + (q->got - HDR);
    len = q->rtotal - q->got;
  } else {
    size_t k = q->got - HDR, j = k / nbytes;
    at = rbuf + (size_t)slot[q->ranks[j]] * nbytes + k % nbytes;
    len = nbytes - k % nbytes;
  }
  return recv(fds[q->proc], at, len, MSG_DONTWAIT);
}

/* Marks the connections unusable (why), sends an abort to each peer at a frame boundary, closes
 * every connection. net_mu held. */
static void fail_locked(const char *why, peer *qs, int npeers) {
  if (!broken[0]) snprintf(broken, sizeof broken, "%s", why);
  size_t wl = strlen(why) < ABORT_MAX ? strlen(why) : ABORT_MAX;
  for (int p = 0; fds && p < nprocs; p++) {
    if (fds[p] < 0) continue;
    int mid_frame = 0; /* an abort inside a half-sent frame would read as garbage: close only */
    for (int i = 0; i < npeers; i++)
      if (qs[i].proc == p) mid_frame = qs[i].sent > 0 && qs[i].sent < qs[i].stotal;
    if (!mid_frame) {
      unsigned char b[HDR + ABORT_MAX];
      encode(b, &(header){FRAME_ABORT, 0, wl, 0, 0, (uint32_t)me});
      memcpy(b + HDR, why, wl);
      (void)!send(fds[p], b, HDR + wl, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    shutdown(fds[p], SHUT_RDWR);
    close(fds[p]);
    fds[p] = -1;
  }
}

/* A connection to q failed: its message, or the reason of an abort q sent after the frame of
 * this exchange (it failed, then closed: this process's send found the connection gone). */
static int lost(peer *q, const char *what, char *err, size_t errlen) {
  unsigned char b[HDR + ABORT_MAX + 1];
  header h;
  ssize_t k = q->got == q->rtotal ? recv(fds[q->proc], b, sizeof b - 1, MSG_DONTWAIT) : -1;
  if (k >= HDR && !decode(b, &h) && h.kind == FRAME_ABORT) {
    b[k] = 0;
    return kl_error(err, errlen, KL_ERR_INTERNAL, "process %d failed: %s", q->proc, (char *)b + HDR);
  }
  return kl_error(err, errlen, KL_ERR_INTERNAL, "lost the connection to process %d (%s): did it exit or fail?", q->proc,
                  what);
}

/* Checks a peer's header against what this process expects; 0, or -1 with a message. */
static int check_header(peer *q, int n, size_t nbytes, char *err, size_t errlen) {
  header *h = &q->h;
  if (decode(q->rhdr, h) || (h->kind != FRAME_DATA && h->kind != FRAME_ABORT))
    return kl_error(err, errlen, KL_ERR_INTERNAL, "received a malformed message from process %d", q->proc);
  if (h->kind == FRAME_ABORT) {
    q->rtotal = HDR + (h->nbytes < ABORT_MAX ? h->nbytes : ABORT_MAX);
    return 0;
  }
  if (h->seq != recv_seq[q->proc] || h->nbytes != nbytes || h->nposts != (uint32_t)q->nranks || h->group != (uint32_t)n)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "the processes are out of step: process %d sent its collective #%llu "
                    "over %u devices with %u post(s) of %llu bytes; this one (process %d) is at #%llu over %d devices "
                    "with %d post(s) of %zu bytes from it (do all processes run the same computations in the same order?)",
                    q->proc, (unsigned long long)h->seq, h->group, h->nposts, (unsigned long long)h->nbytes, me,
                    (unsigned long long)recv_seq[q->proc], n, q->nranks, nbytes);
  q->rtotal = HDR + (size_t)q->nranks * nbytes;
  return 0;
}

int kl_net_exchange(int n, const int *procs, const void **posts, size_t nbytes, char *recv, char *err,
                    size_t errlen) {
  pthread_mutex_lock(&net_mu);
  int rc = 0, npeers = 0, nmine = 0;
  peer *qs = NULL;
  int *mine = malloc(sizeof(int) * (size_t)n), *sorted = malloc(sizeof(int) * (size_t)n);
  int *slot = malloc(sizeof(int) * (size_t)n);
  struct pollfd *pf = malloc(sizeof *pf * (size_t)(nprocs > 0 ? nprocs : 1));
  if (!fds) {
    rc = kl_error(err, errlen, KL_ERR_INTERNAL, "%s", broken[0] ? broken : "the processes are not connected "
                  "(kiln.distributed.initialize was not called, or shutdown was)");
    goto out;
  }
  if (broken[0]) {
    rc = kl_error(err, errlen, KL_ERR_INTERNAL, "the connections between the processes were closed after an earlier "
                  "failure: %s", broken);
    goto out;
  }
  if (!mine || !sorted || !slot || !pf || !(qs = calloc((size_t)nprocs, sizeof *qs))) {
    rc = kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory exchanging data between processes");
    goto out;
  }
  /* the peers, in process order, each with its ranks; the remote ranks' slots in recv */
  int nsorted = 0, nremote = 0;
  for (int p = 0; p < nprocs; p++) {
    if (p == me) continue;
    int first = nsorted;
    for (int r = 0; r < n; r++)
      if (procs[r] == p) sorted[nsorted++] = r;
    if (nsorted > first) qs[npeers++] = (peer){.proc = p, .ranks = sorted + first, .nranks = nsorted - first};
  }
  for (int r = 0; r < n; r++) {
    if (procs[r] == me) mine[nmine++] = r;
    else slot[r] = nremote++;
    if (procs[r] < 0 || procs[r] >= nprocs) {
      rc = kl_error(err, errlen, KL_ERR_INTERNAL, "a device of process %d, but this run has %d processes", procs[r], nprocs);
      goto out;
    }
  }
  for (int i = 0; i < npeers; i++) {
    peer *q = &qs[i];
    if (fds[q->proc] < 0) {
      rc = kl_error(err, errlen, KL_ERR_INTERNAL, "no connection to process %d", q->proc);
      goto out;
    }
    encode(q->shdr, &(header){FRAME_DATA, sent_seq[q->proc], nbytes, (uint32_t)nmine, (uint32_t)n, (uint32_t)me});
    q->stotal = HDR + (size_t)nmine * nbytes;
    q->rtotal = HDR;
  }
  double deadline = now_s() + timeout_s; /* moved on whenever bytes move: the timeout is for silence */
  for (;;) {
    int np = 0;
    for (int i = 0; i < npeers; i++) {
      peer *q = &qs[i];
      short ev = (short)((q->sent < q->stotal ? POLLOUT : 0) | (q->got < q->rtotal ? POLLIN : 0));
      if (ev) pf[np++] = (struct pollfd){fds[q->proc], ev, 0};
    }
    if (!np) break;
    double left = deadline - now_s();
    int k = left > 0 ? poll(pf, (nfds_t)np, (int)(left * 1000) + 1) : 0;
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      char who[128] = "";
      for (int i = 0, m = 0; i < npeers; i++)
        if (qs[i].got < qs[i].rtotal || qs[i].sent < qs[i].stotal)
          m += snprintf(who + m, m < (int)sizeof who ? sizeof who - (size_t)m : 0, "%s%d", m ? ", " : "", qs[i].proc);
      rc = kl_error(err, errlen, KL_ERR_INTERNAL, "timed out after %g s waiting for process(es) %s (stuck, or not "
                    "running this computation; KILN_COLLECTIVE_TIMEOUT sets the wait)", timeout_s, who);
      break;
    }
    for (int i = 0, j = 0; i < npeers && !rc; i++) {
      peer *q = &qs[i];
      if (!(q->sent < q->stotal || q->got < q->rtotal)) continue;
      short re = pf[j++].revents;
      if (q->got < q->rtotal && (re & (POLLIN | POLLHUP | POLLERR))) {
        ssize_t got = recv_some(q, slot, recv, nbytes);
        if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
          rc = lost(q, got == 0 ? "closed by it" : strerror(errno), err, errlen);
          break;
        }
        if (got > 0) {
          deadline = now_s() + timeout_s;
          q->got += (size_t)got;
          if (q->got == HDR && check_header(q, n, nbytes, err, errlen)) rc = -1;
          else if (q->h.kind == FRAME_ABORT && q->got == q->rtotal) {
            q->why[q->got - HDR] = 0;
            rc = kl_error(err, errlen, KL_ERR_INTERNAL, "process %d failed: %s", q->proc, q->why);
          }
        }
      }
      if (!rc && q->sent < q->stotal && (re & (POLLOUT | POLLERR))) {
        ssize_t s = send_some(q, mine, nmine, posts, nbytes);
        if (s < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
          rc = lost(q, strerror(errno), err, errlen);
          break;
        }
        if (s > 0) {
          deadline = now_s() + timeout_s;
          q->sent += (size_t)s;
        }
      }
    }
    if (rc) break;
  }
  if (rc) {
    fail_locked(err, qs, npeers);
  } else
    for (int i = 0; i < npeers; i++) {
      sent_seq[qs[i].proc]++;
      recv_seq[qs[i].proc]++;
      for (int j = 0; j < qs[i].nranks; j++) posts[qs[i].ranks[j]] = recv + (size_t)slot[qs[i].ranks[j]] * nbytes;
    }
out:
  free(mine);
  free(sorted);
  free(slot);
  free(pf);
  free(qs);
  pthread_mutex_unlock(&net_mu);
  return rc;
}

void kl_net_abort(int n, const int *procs, const char *why) {
  pthread_mutex_lock(&net_mu);
  if (fds && !broken[0]) {
    (void)n;
    (void)procs; /* every connection goes: the run cannot go on in step */
    fail_locked(why, NULL, 0);
  }
  pthread_mutex_unlock(&net_mu);
}
