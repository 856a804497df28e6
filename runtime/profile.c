/* profile.c: see profile.h. One growing array under one lock, touched only while a profile records;
 * the hooks read the flag alone while none does. */
#define _GNU_SOURCE
#include "profile.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

atomic_int kl_prof_flag;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER; /* events, n, cap, dropped */
static kl_prof_event *events;
static size_t n, cap, dropped;
static atomic_ullong next_id;
static _Thread_local uint64_t current_launch;
static _Thread_local int my_tid;

uint64_t kl_prof_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t kl_prof_next_id(void) { return atomic_fetch_add(&next_id, 1) + 1; }
uint64_t kl_prof_current_launch(void) { return current_launch; }
void kl_prof_set_current_launch(uint64_t id) { current_launch = id; }

/* A free slot in `events` (under mu), or NULL: full, or out of memory (counted as dropped). */
static kl_prof_event *slot(void) {
  if (n == cap) {
    size_t c = cap ? cap * 2 : 4096;
    kl_prof_event *e = n < KL_PROF_MAX ? realloc(events, c * sizeof *e) : NULL;
    if (!e) {
      dropped++;
      return NULL;
    }
    events = e, cap = c;
  }
  return &events[n++];
}

void kl_prof_add(const char *cat, const char *name, uint64_t t0, uint64_t t1, uint64_t id, const char *fmt, ...) {
  if (!my_tid) my_tid = (int)syscall(SYS_gettid);
  char args[sizeof events->args] = "";
  if (fmt) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
  }
  pthread_mutex_lock(&mu);
  kl_prof_event *e = kl_prof_on() ? slot() : NULL;
  if (e) {
    e->t0 = t0, e->t1 = t1 < t0 ? t0 : t1, e->id = id, e->tid = my_tid, e->cat = cat;
    snprintf(e->name, sizeof e->name, "%s", name ? name : "");
    memcpy(e->args, args, sizeof args);
  }
  pthread_mutex_unlock(&mu);
}

int kl_prof_start(void) {
  pthread_mutex_lock(&mu);
  int on = atomic_load(&kl_prof_flag);
  if (!on) {
    free(events);
    events = NULL, n = cap = dropped = 0;
    atomic_store(&kl_prof_flag, 1);
  }
  pthread_mutex_unlock(&mu);
  return on ? -1 : 0;
}

void kl_prof_stop(void) {
  pthread_mutex_lock(&mu);
  atomic_store(&kl_prof_flag, 0);
  pthread_mutex_unlock(&mu);
}

kl_prof_event *kl_prof_take(size_t *count, size_t *lost) {
  pthread_mutex_lock(&mu);
  kl_prof_event *e = events;
  *count = n, *lost = dropped;
  events = NULL, n = cap = dropped = 0;
  pthread_mutex_unlock(&mu);
  return e;
}
