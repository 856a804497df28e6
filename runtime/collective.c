/* collective.c: the in-process rendezvous of simulated devices (collective.h): a generation barrier
 * over the group's participants, with a board of posted pointers. Each collective is two barriers:
 * after posting (everyone's data is there) and after reading (nobody still reads it). Participants
 * run one program in one order, so the k-th barrier of each is the same collective: the barrier's
 * generation is the sequence number. A group spanning processes has a board of all its ranks; the
 * last of this process's participants to post runs the network exchange (collective_net.h) before
 * the barrier opens, which fills the other processes' posts in. Knows nothing of the IR, MLIR or
 * Python. */
#include "collective.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/status.h"
#include "collective_net.h"

struct kl_coll_group {
  int n;                   /* participants, in every process */
  int nlocal;              /* participants this process runs (n unless the group spans processes) */
  int refcount;            /* atomic */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;             /* participants at the current barrier */
  unsigned long generation; /* barriers passed */
  int aborted;             /* a participant failed */
  int careful;             /* the participants meet around every collective (kl_coll_group_set_careful) */
  int done;                /* this process's participants that finished their program */
  const void **posts;      /* n pointers */
  const char **whats;      /* n: what each posted to the current exchange (a collective's name), NULL:
                              nothing (cleared as each barrier opens) */
  size_t *sizes;           /* n: its bytes */
  int *ordinals;           /* n devices, or NULL */
  int *procs;              /* per rank, its process; NULL for a group of this process alone */
  char *recv;              /* the other processes' posts of the current exchange (owned) */
  size_t recv_cap;         /* bytes at recv */
  char why[320];           /* why the group failed, when the network said; "" otherwise */
};

static _Thread_local kl_coll_group *current;
static _Thread_local int current_rank;

kl_coll_group *kl_coll_group_new(int n) {
  kl_coll_group *g = calloc(1, sizeof *g);
  if (!g || n < 1 || !(g->posts = calloc((size_t)n, sizeof *g->posts)) ||
      !(g->whats = calloc((size_t)n, sizeof *g->whats)) || !(g->sizes = calloc((size_t)n, sizeof *g->sizes))) {
    if (g) free(g->posts), free(g->whats);
    free(g);
    return NULL;
  }
  g->n = g->nlocal = n;
  g->refcount = 1;
  pthread_mutex_init(&g->mu, NULL);
  pthread_cond_init(&g->cv, NULL);
  return g;
}

void kl_coll_group_retain(kl_coll_group *g) { atomic_fetch_add((_Atomic int *)&g->refcount, 1); }

void kl_coll_group_release(kl_coll_group *g) {
  if (!g || atomic_fetch_sub((_Atomic int *)&g->refcount, 1) != 1) return;
  pthread_mutex_destroy(&g->mu);
  pthread_cond_destroy(&g->cv);
  free(g->posts);
  free(g->whats);
  free(g->sizes);
  free(g->ordinals);
  free(g->procs);
  free(g->recv);
  free(g);
}

kl_coll_group *kl_coll_group_new_spanning(int n, const int *procs, int me) {
  kl_coll_group *g = kl_coll_group_new(n);
  if (!g) return NULL;
  if (!(g->procs = malloc(sizeof(int) * (size_t)n))) {
    kl_coll_group_release(g);
    return NULL;
  }
  memcpy(g->procs, procs, sizeof(int) * (size_t)n);
  g->nlocal = 0;
  for (int r = 0; r < n; r++) g->nlocal += procs[r] == me;
  return g;
}

int kl_coll_group_set_ordinals(kl_coll_group *g, const int *ordinals) {
  if (!g->ordinals && !(g->ordinals = malloc(sizeof(int) * (size_t)g->n))) return -1;
  memcpy(g->ordinals, ordinals, sizeof(int) * (size_t)g->n);
  return 0;
}

const int *kl_coll_group_ordinals(const kl_coll_group *g) { return g->ordinals; }

int kl_coll_group_size(const kl_coll_group *g) { return g->n; }

int kl_coll_group_spans(const kl_coll_group *g) { return g->procs != NULL; }

void kl_coll_set_current(kl_coll_group *g, int rank) {
  current = g;
  current_rank = rank;
}

kl_coll_group *kl_coll_current(int *rank) {
  if (rank) *rank = current_rank;
  return current;
}

/* The other processes' posts of nbytes each, brought in over the network (the last participant of
 * this process to post, g->mu not held, the others waiting). 0, or -1 with g->why set. */
static int exchange_remote(kl_coll_group *g, size_t nbytes) {
  size_t need = (size_t)(g->n - g->nlocal) * nbytes;
  if (need > g->recv_cap) {
    char *r = realloc(g->recv, need);
    if (!r) {
      snprintf(g->why, sizeof g->why, "out of host memory receiving %zu bytes from the other processes", need);
      kl_net_abort(g->n, g->procs, g->why);
      return -1;
    }
    g->recv = r;
    g->recv_cap = need;
  }
  return kl_net_exchange(g->n, g->procs, g->posts, nbytes, g->recv, g->why, sizeof g->why) ? -1 : 0;
}

/* Fails the group (g->mu held) with `why` unless it failed already. */
static void fail_locked(kl_coll_group *g, const char *why) {
  if (g->aborted) return;
  g->aborted = 1;
  snprintf(g->why, sizeof g->why, "%s", why);
  pthread_cond_broadcast(&g->cv);
}

/* Every participant still running waits at a barrier that a finished one will never reach (g->mu
 * held): the devices took different paths through the program. */
static void check_stranded(kl_coll_group *g) {
  if (g->done && g->arrived && g->arrived + g->done == g->nlocal)
    fail_locked(g, "a device of this computation finished its program while the others wait at a collective: the "
                "devices took different paths (a loop trip count or cond branch that differs per device must not "
                "hold collectives)");
}

/* Whether this process's posts of the current exchange agree (g->mu held; the last to arrive):
 * the same collective, the same bytes. A disagreement fails the group naming the two. */
static void check_posts(kl_coll_group *g) {
  int first = -1;
  for (int r = 0; r < g->n; r++) {
    if (g->procs || !g->whats[r]) continue;
    if (first < 0) {
      first = r;
      continue;
    }
    if (strcmp(g->whats[r], g->whats[first]) || g->sizes[r] != g->sizes[first]) {
      char why[320];
      snprintf(why, sizeof why, "the devices of this computation reached different collectives at once: device %d: "
               "%s of %zu bytes, device %d: %s of %zu bytes (a cond branch that differs per device must not hold "
               "collectives)", first, g->whats[first], g->sizes[first], r, g->whats[r], g->sizes[r]);
      fail_locked(g, why);
      return;
    }
  }
}

/* Waits for this process's other participants at the next barrier (the last to arrive first runs
 * the network exchange of nbytes per post when `remote`); 0, or -1 when the group was aborted. */
static int barrier(kl_coll_group *g, int remote, size_t nbytes, char *err, size_t errlen) {
  pthread_mutex_lock(&g->mu);
  unsigned long gen = g->generation;
  if (!g->aborted && ++g->arrived == g->nlocal && (check_posts(g), !g->aborted)) {
    memset(g->whats, 0, sizeof *g->whats * (size_t)g->n); /* (a rendezvous posts nothing to check) */
    if (remote) { /* the others wait on the generation meanwhile */
      pthread_mutex_unlock(&g->mu);
      int rc = exchange_remote(g, nbytes);
      pthread_mutex_lock(&g->mu);
      if (rc) g->aborted = 1;
    }
    g->arrived = 0;
    g->generation++;
    pthread_cond_broadcast(&g->cv);
  }
  check_stranded(g);
  while (!g->aborted && g->generation == gen) pthread_cond_wait(&g->cv, &g->mu);
  int failed = g->aborted;
  pthread_mutex_unlock(&g->mu);
  if (failed && g->why[0]) kl_error(err, errlen, KL_ERR_INTERNAL, "%s", g->why);
  else if (failed)
    kl_error(err, errlen, KL_ERR_INTERNAL, "another device of this computation failed before reaching it");
  return failed ? -1 : 0;
}

const void *const *kl_coll_exchange(kl_coll_group *g, int rank, const void *mine, size_t nbytes, const char *what,
                                    char *err, size_t errlen) {
  g->posts[rank] = mine;
  g->whats[rank] = what;
  g->sizes[rank] = nbytes;
  return barrier(g, g->procs != NULL, nbytes, err, errlen) ? NULL : g->posts;
}

int kl_coll_rendezvous(kl_coll_group *g, char *err, size_t errlen) { return barrier(g, 0, 0, err, errlen); }

void kl_coll_finish(kl_coll_group *g) {
  if (!g) return;
  pthread_mutex_lock(&g->mu);
  g->done++;
  check_stranded(g);
  pthread_mutex_unlock(&g->mu);
}

void kl_coll_group_set_careful(kl_coll_group *g, int on) { g->careful = on; }

int kl_coll_group_careful(const kl_coll_group *g) { return g->careful; }

void kl_coll_abort(kl_coll_group *g, const char *why) {
  pthread_mutex_lock(&g->mu);
  int first = !g->aborted;
  g->aborted = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
  if (first && g->procs) /* the other processes must not wait for this one either */
    kl_net_abort(g->n, g->procs, why && *why ? why : "a device of this computation failed");
}
