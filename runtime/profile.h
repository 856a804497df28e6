/* profile.h: the profiler's host-side recorder (kiln.profiler): timed events (what ran, from when
 * to when, on which thread) kept in memory while a trace is on, in one clock (CLOCK_MONOTONIC,
 * nanoseconds) that CUPTI's device records are moved into (runtime/cupti.h). While no trace is
 * on, every hook costs one predictable branch on a global flag and nothing else. Knows nothing of
 * the IR, MLIR or Python. (Not to be confused with tracer/: the tracing of programs.) */
#ifndef KL_PROFILE_H
#define KL_PROFILE_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Nonzero while a trace is recording (read it through kl_prof_on; hidden: read directly, not through
 * the GOT, in the one shared object kiln's core is linked into). */
extern atomic_int kl_prof_flag __attribute__((visibility("hidden")));

static inline int kl_prof_on(void) {
  return __builtin_expect(atomic_load_explicit(&kl_prof_flag, memory_order_relaxed), 0);
}

/* Now, in the trace clock (CLOCK_MONOTONIC in nanoseconds; Python's time.monotonic_ns). */
uint64_t kl_prof_now(void);

/* The start of a timed region: now while recording, else 0 (the one branch). */
static inline uint64_t kl_prof_begin(void) { return kl_prof_on() ? kl_prof_now() : 0; }

/* Records one complete event [t0, t1] on the calling thread: its category (a static string:
 * "launch", "compile", "library", ...), its name (copied, cut at 95 bytes), an id (0: none; a
 * launch's id also tags the device work it queued) and its arguments as the members of a JSON
 * object, printf-style (`"kernels": %d`; copied, cut at 191 bytes; NULL: none). Dropped when no
 * trace is recording (it stopped since t0) or the trace holds KL_PROF_MAX events already. */
void kl_prof_add(const char *cat, const char *name, uint64_t t0, uint64_t t1, uint64_t id, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));

/* Ends a region begun by kl_prof_begin: records it when t0 is not 0 (recording then). */
#define KL_PROF_END(t0, cat, name, ...)                                                        \
  do {                                                                                          \
    if (__builtin_expect((t0) != 0, 0)) kl_prof_add((cat), (name), (t0), kl_prof_now(), 0, __VA_ARGS__); \
  } while (0)

/* A fresh nonzero id for a launch (what CUPTI's external correlation carries). */
uint64_t kl_prof_next_id(void);
/* The launch the calling thread is queueing (0: none): set by the launch hook around the device's
 * launch, so that the device's own events (the CPU executor's run of it) name it. */
uint64_t kl_prof_current_launch(void);
void kl_prof_set_current_launch(uint64_t id);

#define KL_PROF_MAX (1 << 21)

/* One recorded event. */
typedef struct {
  uint64_t t0, t1; /* kl_prof_now's clock */
  uint64_t id;     /* 0, or the launch id */
  int tid;         /* the recording thread (Linux thread id) */
  const char *cat; /* static */
  char name[96];
  char args[192];  /* members of a JSON object ("" for none) */
} kl_prof_event;

/* Starts recording (events of an earlier trace are dropped): 0, or -1 when a trace is already on. */
int kl_prof_start(void);
/* Stops recording; the events stay until taken. */
void kl_prof_stop(void);
/* The events recorded since the start (owned by the caller: free()), *n of them, *dropped the
 * ones past KL_PROF_MAX; the recorder is left empty. NULL with *n 0 when there are none (or no
 * memory: then *dropped counts them all). */
kl_prof_event *kl_prof_take(size_t *n, size_t *dropped);
#endif
