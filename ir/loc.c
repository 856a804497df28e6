/* loc.c: source locations of updates and the copy report (loc.h). */
#include "loc.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alloc.h"

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char **texts; /* texts[id - 1]; kept for the process (ids live in compiled programs) */
static int ntexts, captexts;
static atomic_int mode;

int kl_loc_intern(const char *text) {
  pthread_mutex_lock(&mu);
  int id = 0;
  for (int i = 0; i < ntexts && !id; i++)
    if (!strcmp(texts[i], text)) id = i + 1;
  if (!id) {
    if (ntexts == captexts) {
      int cap = captexts ? 2 * captexts : 64;
      char **t = kl_realloc(texts, sizeof *t * (size_t)cap);
      if (t) texts = t, captexts = cap;
    }
    char *copy = ntexts < captexts ? kl_malloc(strlen(text) + 1) : NULL;
    if (copy) {
      strcpy(copy, text);
      texts[ntexts++] = copy;
      id = ntexts;
    }
  }
  pthread_mutex_unlock(&mu);
  return id;
}

const char *kl_loc_text(int id) {
  pthread_mutex_lock(&mu);
  const char *t = id > 0 && id <= ntexts ? texts[id - 1] : "";
  pthread_mutex_unlock(&mu);
  return t;
}

void kl_copies_set_mode(int m) { atomic_store(&mode, m); }
int kl_copies_mode(void) { return atomic_load(&mode); }

static const char *why_text(kl_copy_why why) {
  switch (why) {
  case KL_COPY_INPUT:
    return "its operand is an argument of the computation that is not donated (an eager update, or a jitted "
           "function's argument: donate it with jit(..., donate_argnums=...), or do the updates inside the jitted "
           "function)";
  case KL_COPY_NOT_DONATED:
    return "its operand's argument is donated, but this call's array could not be (a NumPy array, or one that "
           "something else still holds)";
  case KL_COPY_LIVE: return "its operand is used again after the update, so the update cannot overwrite it";
  case KL_COPY_OUTPUT: return "its operand is also a result of the computation";
  case KL_COPY_CARRY:
    return "the loop body still reads the carry's old value after updating it, or returns it, so the update "
           "cannot overwrite it";
  case KL_COPY_LOOP_INPUT: return "its operand is a loop constant or a scanned slice, not a carry";
  case KL_COPY_BRANCH: return "it updates an operand of a cond branch, whose results are new buffers";
  }
  return "";
}

int kl_copy_report(int loc, const char *prim, const char *type, size_t bytes, kl_copy_why why, int per_trip, char *err,
                   size_t errlen) {
  int m = kl_copies_mode();
  if (!loc || !m) return 0;
  char line[1024], size[32];
  if (bytes >= (1 << 20)) snprintf(size, sizeof size, "%.1f MiB", (double)bytes / (1 << 20));
  else if (bytes >= (1 << 10)) snprintf(size, sizeof size, "%.1f KiB", (double)bytes / (1 << 10));
  else snprintf(size, sizeof size, "%zu bytes", bytes);
  snprintf(line, sizeof line, "%s of %s at %s copies its operand (%s%s): %s", prim, type, kl_loc_text(loc), size,
           per_trip ? " per loop trip" : "", why_text(why));
  if (m & KL_COPIES_FORBID)
    return kl_error(err, errlen, KL_ERR_COPY, "%s. Copies are forbidden (kiln.config 'kiln_forbid_copies').", line);
  fprintf(stderr, "kiln: copy: %s\n", line);
  return 0;
}
