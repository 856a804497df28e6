/* nccl.c: NCCL opened at run time (nccl.h): the newest of the system's and the nvidia-nccl
 * wheel's. The library's types are declared here as NCCL's ABI has them (opaque communicators,
 * int enums), so kiln builds with no NCCL headers. Knows nothing of the IR, MLIR or Python. */
#define _GNU_SOURCE
#include "nccl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/status.h"
#include "libfind.h"
#include "profile.h"

typedef void *nccl_comm;
typedef int nccl_result;
typedef struct {
  char internal[128]; /* ncclUniqueId (NCCL_UNIQUE_ID_BYTES), passed by value to ncclCommInitRank */
} nccl_unique_id;

static struct {
  nccl_result (*comm_init_all)(nccl_comm *comms, int ndev, const int *devlist);
  nccl_result (*all_reduce)(const void *, void *, size_t, int, int, nccl_comm, void *);
  nccl_result (*all_gather)(const void *, void *, size_t, int, nccl_comm, void *);
  nccl_result (*reduce_scatter)(const void *, void *, size_t, int, int, nccl_comm, void *);
  nccl_result (*send)(const void *, size_t, int, int, nccl_comm, void *);
  nccl_result (*recv)(void *, size_t, int, int, nccl_comm, void *);
  nccl_result (*group_start)(void);
  nccl_result (*group_end)(void);
  const char *(*error_string)(nccl_result);
  nccl_result (*get_unique_id)(nccl_unique_id *); /* optional: groups spanning processes */
  nccl_result (*comm_init_rank)(nccl_comm *, int, nccl_unique_id, int);
} nc;

static pthread_once_t open_once = PTHREAD_ONCE_INIT;
static char open_error[256];

static kl_libfind find = KL_LIBFIND_INIT; /* the nvidia-nccl wheel's library, registered by python/ */
static int version;                       /* ncclGetVersion of the one opened (e.g. 22703 for 2.27.3) */

int kl_nccl_add_search_path(const char *path) { return kl_libfind_add(&find, path); }

const char *kl_nccl_library(int *v) {
  if (v) *v = version;
  return nc.comm_init_all ? find.path : "";
}

/* The NCCL version a handle reports (0: none). */
static int version_of(void *h) {
  int (*get)(int *) = h ? (int (*)(int *))dlsym(h, "ncclGetVersion") : NULL;
  int v = 0;
  return get && !get(&v) ? v : 0;
}

/* KILN_NCCL_LIB when set; otherwise the newest of the system's libnccl.so.2 and the registered
 * wheels' (PyTorch brings its own, often newer than the system's). */
static void *open_best(void) {
  const char *env = getenv("KILN_NCCL_LIB");
  if (env && *env) return kl_libfind_open(&find, env);
  void *best = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
  char best_path[512] = "libnccl.so.2";
  int best_v = version_of(best);
  pthread_mutex_lock(&find.mu);
  int n = find.nextra;
  pthread_mutex_unlock(&find.mu);
  for (int i = 0; i < n; i++) {
    void *h = dlopen(find.extra[i], RTLD_NOW | RTLD_LOCAL);
    int v = version_of(h);
    if (h && (!best || v > best_v)) {
      if (best) dlclose(best);
      best = h, best_v = v;
      snprintf(best_path, sizeof best_path, "%s", find.extra[i]);
    } else if (h) {
      dlclose(h);
    }
  }
  if (best) snprintf(find.path, sizeof find.path, "%s", best_path);
  version = best_v;
  return best;
}

static void open_nccl(void) {
  setenv("NCCL_NVLS_ENABLE", "0", 0); /* NVLink SHARP multicast off unless the user says otherwise */
  void *h = open_best();
  if (!h) {
    snprintf(open_error, sizeof open_error, "libnccl.so.2 not found (%s; the nvidia-nccl wheel or KILN_NCCL_LIB=path "
             "would do)", dlerror());
    return;
  }
  if (getenv("KILN_LOG_COMPILES"))
    fprintf(stderr, "kiln: NCCL %d.%d.%d from %s\n", version / 10000, version / 100 % 100, version % 100, find.path);
#define SYM(field, name)                                                                      \
  if (!(*(void **)&nc.field = dlsym(h, name))) {                                              \
    snprintf(open_error, sizeof open_error, "libnccl.so.2 lacks %s", name);                   \
    memset(&nc, 0, sizeof nc);                                                                \
    return;                                                                                   \
  }
  SYM(comm_init_all, "ncclCommInitAll")
  SYM(all_reduce, "ncclAllReduce")
  SYM(all_gather, "ncclAllGather")
  SYM(reduce_scatter, "ncclReduceScatter")
  SYM(send, "ncclSend")
  SYM(recv, "ncclRecv")
  SYM(group_start, "ncclGroupStart")
  SYM(group_end, "ncclGroupEnd")
  SYM(error_string, "ncclGetErrorString")
#undef SYM
  *(void **)&nc.get_unique_id = dlsym(h, "ncclGetUniqueId");
  *(void **)&nc.comm_init_rank = dlsym(h, "ncclCommInitRank");
}

int kl_nccl_available(char *why, size_t n) {
  pthread_once(&open_once, open_nccl);
  if (nc.comm_init_all) return 1;
  if (why) snprintf(why, n, "%s", open_error);
  return 0;
}

#define MAX_SETS 64
#define MAX_RANKS 64
struct kl_nccl_comms {
  int n;
  int ordinals[MAX_RANKS];
  nccl_comm comms[MAX_RANKS]; /* a set spanning processes: this process's ranks' only */
  int span;                   /* a group spanning processes, keyed by its members' global ranks */
  int64_t key[MAX_RANKS];
};
static kl_nccl_comms sets[MAX_SETS];
static int nsets;
static pthread_mutex_t sets_mu = PTHREAD_MUTEX_INITIALIZER;

static int check(nccl_result r, const char *what, char *err, size_t errlen) {
  if (r == 0) return 0;
  return kl_error(err, errlen, KL_ERR_INTERNAL, "NCCL %s failed: %s", what, nc.error_string ? nc.error_string(r) : "?");
}

const kl_nccl_comms *kl_nccl_comms_for(const int *ordinals, int n, char *err, size_t errlen) {
  char why[256];
  if (!kl_nccl_available(why, sizeof why)) {
    kl_error(err, errlen, KL_ERR_UNSUPPORTED, "collectives between GPUs need NCCL: %s", why);
    return NULL;
  }
  if (n < 1 || n > MAX_RANKS) {
    kl_error(err, errlen, KL_ERR_VALUE, "NCCL: a device set of %d GPUs (1 to %d)", n, MAX_RANKS);
    return NULL;
  }
  pthread_mutex_lock(&sets_mu);
  kl_nccl_comms *c = NULL;
  for (int i = 0; i < nsets && !c; i++)
    if (!sets[i].span && sets[i].n == n && !memcmp(sets[i].ordinals, ordinals, sizeof(int) * (size_t)n)) c = &sets[i];
  if (!c && nsets == MAX_SETS) kl_error(err, errlen, KL_ERR_UNSUPPORTED, "NCCL: more than %d device sets", MAX_SETS);
  else if (!c) {
    kl_nccl_comms *s = &sets[nsets];
    s->n = n;
    memcpy(s->ordinals, ordinals, sizeof(int) * (size_t)n);
    if (!check(nc.comm_init_all(s->comms, n, ordinals), "ncclCommInitAll", err, errlen)) c = &sets[nsets++];
  }
  pthread_mutex_unlock(&sets_mu);
  return c;
}

int kl_nccl_all_reduce(const kl_nccl_comms *c, int rank, const void *send, void *recv, size_t count, int dtype,
                       int op, void *stream, char *err, size_t errlen) {
  uint64_t t0 = kl_prof_begin();
  nccl_result r = nc.all_reduce(send, recv, count, dtype, op, c->comms[rank], stream);
  KL_PROF_END(t0, "library", "ncclAllReduce", "\"count\": %zu, \"rank\": %d", count, rank);
  return check(r, "all-reduce", err, errlen);
}

int kl_nccl_all_gather(const kl_nccl_comms *c, int rank, const void *send, void *recv, size_t send_count, int dtype,
                       void *stream, char *err, size_t errlen) {
  uint64_t t0 = kl_prof_begin();
  nccl_result r = nc.all_gather(send, recv, send_count, dtype, c->comms[rank], stream);
  KL_PROF_END(t0, "library", "ncclAllGather", "\"count\": %zu, \"rank\": %d", send_count, rank);
  return check(r, "all-gather", err, errlen);
}

int kl_nccl_reduce_scatter(const kl_nccl_comms *c, int rank, const void *send, void *recv, size_t recv_count,
                           int dtype, int op, void *stream, char *err, size_t errlen) {
  uint64_t t0 = kl_prof_begin();
  nccl_result r = nc.reduce_scatter(send, recv, recv_count, dtype, op, c->comms[rank], stream);
  KL_PROF_END(t0, "library", "ncclReduceScatter", "\"count\": %zu, \"rank\": %d", recv_count, rank);
  return check(r, "reduce-scatter", err, errlen);
}

/* The size in bytes of one element of NCCL type t. */
static size_t type_bytes(int t) {
  switch (t) {
  case KL_NCCL_I8: case KL_NCCL_U8: return 1;
  case KL_NCCL_F16: case KL_NCCL_BF16: return 2;
  case KL_NCCL_I32: case KL_NCCL_U32: case KL_NCCL_F32: return 4;
  default: return 8;
  }
}

int kl_nccl_all_to_all(const kl_nccl_comms *c, int rank, const void *send, void *recv, size_t count, int dtype,
                       void *stream, char *err, size_t errlen) {
  size_t blk = count * type_bytes(dtype);
  uint64_t t0 = kl_prof_begin();
  if (check(nc.group_start(), "group start", err, errlen)) return -1;
  nccl_result r = 0;
  for (int k = 0; k < c->n && !r; k++) {
    r = nc.send((const char *)send + (size_t)k * blk, count, dtype, k, c->comms[rank], stream);
    if (!r) r = nc.recv((char *)recv + (size_t)k * blk, count, dtype, k, c->comms[rank], stream);
  }
  nccl_result g = nc.group_end();
  KL_PROF_END(t0, "library", "ncclSend/ncclRecv (all-to-all)", "\"count\": %zu, \"rank\": %d", count, rank);
  return check(r ? r : g, "all-to-all (send/recv)", err, errlen);
}

int kl_nccl_send_recv(const kl_nccl_comms *c, int rank, const void *send, int to, void *recv, int from, size_t count,
                      int dtype, void *stream, char *err, size_t errlen) {
  if (check(nc.group_start(), "group start", err, errlen)) return -1;
  nccl_result r = 0;
  if (to >= 0) r = nc.send(send, count, dtype, to, c->comms[rank], stream);
  if (!r && from >= 0) r = nc.recv(recv, count, dtype, from, c->comms[rank], stream);
  nccl_result g = nc.group_end();
  return check(r ? r : g, "send/recv", err, errlen);
}

int kl_nccl_unique_id(void *id, char *err, size_t errlen) {
  char why[256];
  if (!kl_nccl_available(why, sizeof why))
    return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "collectives between GPUs need NCCL: %s", why);
  if (!nc.get_unique_id || !nc.comm_init_rank)
    return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "NCCL at %s lacks ncclGetUniqueId/ncclCommInitRank (needed "
                    "between processes)", find.path);
  nccl_unique_id u;
  if (check(nc.get_unique_id(&u), "ncclGetUniqueId", err, errlen)) return -1;
  memcpy(id, &u, sizeof u);
  return 0;
}

/* The set of a spanning group (sets_mu held), added when missing and add is set; NULL when absent
 * or the table is full. */
static kl_nccl_comms *span_entry(const int64_t *key, int n, int add) {
  for (int i = 0; i < nsets; i++)
    if (sets[i].span && sets[i].n == n && !memcmp(sets[i].key, key, sizeof(int64_t) * (size_t)n)) return &sets[i];
  if (!add || nsets == MAX_SETS) return NULL;
  kl_nccl_comms *s = &sets[nsets++];
  memset(s, 0, sizeof *s);
  s->span = 1;
  s->n = n;
  memcpy(s->key, key, sizeof(int64_t) * (size_t)n);
  return s;
}

const kl_nccl_comms *kl_nccl_span_find(const int64_t *key, int n, int pos) {
  if (n < 1 || n > MAX_RANKS || pos < 0 || pos >= n) return NULL;
  pthread_mutex_lock(&sets_mu);
  kl_nccl_comms *s = span_entry(key, n, 0);
  const kl_nccl_comms *c = s && s->comms[pos] ? s : NULL;
  pthread_mutex_unlock(&sets_mu);
  return c;
}

const kl_nccl_comms *kl_nccl_span_join(const int64_t *key, int n, int pos, const void *id, char *err, size_t errlen) {
  if (n < 1 || n > MAX_RANKS || pos < 0 || pos >= n) {
    kl_error(err, errlen, KL_ERR_VALUE, "NCCL: a group of %d GPUs (1 to %d)", n, MAX_RANKS);
    return NULL;
  }
  if (!nc.comm_init_rank) {
    kl_error(err, errlen, KL_ERR_UNSUPPORTED, "NCCL at %s lacks ncclCommInitRank (needed between processes)", find.path);
    return NULL;
  }
  pthread_mutex_lock(&sets_mu);
  kl_nccl_comms *s = span_entry(key, n, 1);
  pthread_mutex_unlock(&sets_mu);
  if (!s) {
    kl_error(err, errlen, KL_ERR_UNSUPPORTED, "NCCL: more than %d device sets", MAX_SETS);
    return NULL;
  }
  nccl_unique_id u;
  memcpy(&u, id, sizeof u);
  nccl_comm comm = NULL; /* blocks until every rank of the group joins (the others' threads and processes) */
  if (check(nc.comm_init_rank(&comm, n, u, pos), "ncclCommInitRank", err, errlen)) return NULL;
  pthread_mutex_lock(&sets_mu);
  s->comms[pos] = comm;
  pthread_mutex_unlock(&sets_mu);
  return s;
}
