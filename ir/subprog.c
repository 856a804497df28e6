/* subprog.c: the registry of sub-programs. */
#include "subprog.h"

#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static kl_program **progs;
static uint64_t *hashes;
static int nprogs, capprogs;

/* A program equal to one already registered (same structural hash and size) is freed and the
 * existing id returned, so re-tracing a custom rule on every call (grad outside jit) does not
 * grow the registry. */
int kl_subprog_add(kl_program *pg) {
  uint64_t h = kl_program_hash(pg);
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nprogs; i++)
    if (hashes[i] == h && progs[i]->neqns == pg->neqns && progs[i]->ninputs == pg->ninputs &&
        progs[i]->noutputs == pg->noutputs) {
      pthread_mutex_unlock(&mu);
      kl_program_free(pg);
      return i;
    }
  if (nprogs == capprogs) {
    capprogs = capprogs ? 2 * capprogs : 16;
    progs = realloc(progs, sizeof *progs * (size_t)capprogs);
    hashes = realloc(hashes, sizeof *hashes * (size_t)capprogs);
    if (!progs || !hashes) abort();
  }
  int id = nprogs;
  hashes[nprogs] = h;
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
