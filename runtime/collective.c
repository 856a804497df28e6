/* collective.c: the in-process rendezvous of simulated devices (collective.h): a generation barrier
 * over the group's participants, with a board of posted pointers. Each collective is two barriers:
 * after posting (everyone's data is there) and after reading (nobody still reads it). Participants
 * run one program in one order, so the k-th barrier of each is the same collective: the barrier's
 * generation is the sequence number. Knows nothing of the IR, MLIR or Python. */
#include "collective.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/status.h"

struct kl_coll_group {
  int n;                   /* participants */
  int refcount;            /* atomic */
  pthread_mutex_t mu;
  pthread_cond_t cv;
  int arrived;             /* participants at the current barrier */
  unsigned long generation; /* barriers passed */
  int aborted;             /* a participant failed */
  const void **posts;      /* n pointers */
  int *ordinals;           /* n devices, or NULL */
};

static _Thread_local kl_coll_group *current;
static _Thread_local int current_rank;

kl_coll_group *kl_coll_group_new(int n) {
  kl_coll_group *g = calloc(1, sizeof *g);
  if (!g || n < 1 || !(g->posts = calloc((size_t)n, sizeof *g->posts))) {
    free(g);
    return NULL;
  }
  g->n = n;
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
  free(g->ordinals);
  free(g);
}

int kl_coll_group_set_ordinals(kl_coll_group *g, const int *ordinals) {
  if (!g->ordinals && !(g->ordinals = malloc(sizeof(int) * (size_t)g->n))) return -1;
  memcpy(g->ordinals, ordinals, sizeof(int) * (size_t)g->n);
  return 0;
}

const int *kl_coll_group_ordinals(const kl_coll_group *g) { return g->ordinals; }

int kl_coll_group_size(const kl_coll_group *g) { return g->n; }

void kl_coll_set_current(kl_coll_group *g, int rank) {
  current = g;
  current_rank = rank;
}

kl_coll_group *kl_coll_current(int *rank) {
  if (rank) *rank = current_rank;
  return current;
}

/* Waits for the other participants at the next barrier; 0, or -1 when the group was aborted. */
static int barrier(kl_coll_group *g, char *err, size_t errlen) {
  pthread_mutex_lock(&g->mu);
  unsigned long gen = g->generation;
  if (!g->aborted && ++g->arrived == g->n) {
    g->arrived = 0;
    g->generation++;
    pthread_cond_broadcast(&g->cv);
  }
  while (!g->aborted && g->generation == gen) pthread_cond_wait(&g->cv, &g->mu);
  int failed = g->aborted;
  pthread_mutex_unlock(&g->mu);
  if (failed)
    kl_error(err, errlen, KL_ERR_INTERNAL, "collective: another device of this computation failed before reaching it");
  return failed ? -1 : 0;
}

const void *const *kl_coll_exchange(kl_coll_group *g, int rank, const void *mine, char *err, size_t errlen) {
  g->posts[rank] = mine;
  return barrier(g, err, errlen) ? NULL : g->posts;
}

int kl_coll_release_posts(kl_coll_group *g, char *err, size_t errlen) { return barrier(g, err, errlen); }

void kl_coll_abort(kl_coll_group *g) {
  pthread_mutex_lock(&g->mu);
  g->aborted = 1;
  pthread_cond_broadcast(&g->cv);
  pthread_mutex_unlock(&g->mu);
}
