/* subprog.c: the registry of sub-programs. */
#include "subprog.h"

#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static kl_program **progs;
static int nprogs, capprogs;

int kl_subprog_add(kl_program *pg) {
  pthread_mutex_lock(&mu);
  if (nprogs == capprogs) {
    capprogs = capprogs ? 2 * capprogs : 16;
    progs = realloc(progs, sizeof *progs * (size_t)capprogs);
    if (!progs) abort();
  }
  int id = nprogs;
  progs[nprogs++] = pg;
  pthread_mutex_unlock(&mu);
  return id;
}

const kl_program *kl_subprog_get(int64_t id) {
  pthread_mutex_lock(&mu);
  const kl_program *pg = id >= 0 && id < nprogs ? progs[id] : NULL;
  pthread_mutex_unlock(&mu);
  return pg;
}
