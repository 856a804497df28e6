/* device.c: the table of devices, and the device-generic half of buffers and executables:
 * refcounts, wrapping foreign memory, and dispatch of allocation, waiting, launching and
 * synchronization to the owning device's kl_device. Knows no device's API (no CUDA, no threads). */
#include <limits.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/loc.h"
#include "../ir/status.h"
#include "cupti.h"
#include "device.h"
#include "profile.h"

/* Every kind is linked in: CUDA's driver is opened at run time, so its table is always there and
 * its available() says whether a GPU is usable. */
static const kl_device *const devices[KL_DEV_COUNT] = {
    [KL_DEV_CPU] = &kl_device_cpu,
    [KL_DEV_CUDA] = &kl_device_cuda,
};

const kl_device *kl_device_get(int kind) { return kind >= 0 && kind < KL_DEV_COUNT ? devices[kind] : NULL; }

/* ---- buffers ---- */

kl_buffer *kl_buf_new_on(int device, size_t nbytes, char *err, size_t errlen) {
  const kl_device *d = kl_device_get(device);
  if (!d) {
    snprintf(err, errlen, "internal error: no device of kind %d", device);
    return NULL;
  }
  kl_buffer *b = calloc(1, sizeof *b);
  if (!b) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory: cannot allocate a buffer of %zu bytes", nbytes);
    return NULL;
  }
  if (d->alloc(nbytes, &b->data, err, errlen)) {
    free(b);
    return NULL;
  }
  b->device = device;
  b->ordinal = d->use_ordinal ? d->use_ordinal(-1) : 0; /* where its memory is */
  b->nbytes = nbytes;
  b->refcount = 1;
  b->state = d->born_ready ? KL_BUF_READY : KL_BUF_PENDING;
  return b;
}

kl_buffer *kl_buf_wrap(void *data, size_t nbytes, void (*release)(void *), void *owner) {
  kl_buffer *b = calloc(1, sizeof *b);
  if (!b) return NULL;
  b->data = data;
  b->nbytes = nbytes;
  b->release = release;
  b->owner = owner;
  b->refcount = 1;
  b->state = KL_BUF_READY;
  return b;
}

void kl_buf_retain(kl_buffer *b) { atomic_fetch_add((_Atomic int *)&b->refcount, 1); }

void kl_mem_count_alloc(kl_mem_count *c, size_t n) {
  long long now = atomic_fetch_add(&c->in_use, (long long)n) + (long long)n;
  atomic_fetch_add(&c->nallocs, 1);
  for (long long p = atomic_load(&c->peak); now > p && !atomic_compare_exchange_weak(&c->peak, &p, now);) {
  }
  for (long long l = atomic_load(&c->largest); (long long)n > l && !atomic_compare_exchange_weak(&c->largest, &l, (long long)n);) {
  }
}

void kl_mem_count_free(kl_mem_count *c, size_t n) { atomic_fetch_sub(&c->in_use, (long long)n); }

void kl_mem_count_reset_peak(kl_mem_count *c) { atomic_store(&c->peak, atomic_load(&c->in_use)); }

void kl_mem_count_read(kl_mem_count *c, kl_mem_stats *s) {
  s->bytes_in_use = atomic_load(&c->in_use);
  s->peak_bytes_in_use = atomic_load(&c->peak);
  s->num_allocs = atomic_load(&c->nallocs);
  s->largest_alloc_size = atomic_load(&c->largest);
}

void kl_buf_release(kl_buffer *b) {
  if (!b || atomic_fetch_sub((_Atomic int *)&b->refcount, 1) != 1) return;
  const kl_device *d = devices[b->device];
  if (b->event) d->event_release(b->event);
  if (b->release) b->release(b->owner);
  else if (d->use_ordinal) { /* freed on the device that holds it */
    int old = d->use_ordinal(b->ordinal);
    d->free(b->data, b->nbytes);
    d->use_ordinal(old);
  } else d->free(b->data, b->nbytes);
  free(b->error);
  free(b);
}

int kl_buf_is_ready(const kl_buffer *b) { return devices[b->device]->is_ready(b); }

int kl_buf_wait(kl_buffer *b) { return devices[b->device]->wait(b); }

int kl_buf_wait_for(kl_buffer *b, double seconds) {
  const kl_device *d = devices[b->device];
  return d->wait_for ? d->wait_for(b, seconds) : d->wait(b);
}

static volatile int32_t stop_flag; /* written with atomics, read by generated code as volatile */

static void stop_devices(int requested) {
  for (int k = 0; k < KL_DEV_COUNT; k++)
    if (devices[k]->stop) devices[k]->stop(requested);
}

void kl_rt_stop_request(void) {
  __atomic_store_n(&stop_flag, 1, __ATOMIC_SEQ_CST);
  stop_devices(1);
}

void kl_rt_stop_clear(void) {
  __atomic_store_n(&stop_flag, 0, __ATOMIC_SEQ_CST);
  stop_devices(0);
}
int kl_rt_stop_requested(void) { return __atomic_load_n(&stop_flag, __ATOMIC_RELAXED) != 0; }
volatile int32_t *kl_rt_stop_flag(void) { return &stop_flag; }

int kl_rt_stop_check(char *err, size_t errlen) {
  if (!kl_rt_stop_requested()) return 0;
  return kl_error(err, errlen, KL_ERR_INTERRUPTED, "interrupted: a loop stopped at Ctrl-C (KeyboardInterrupt)");
}

/* ---- executables ---- */

void kl_exec_retain(kl_exec *x) { atomic_fetch_add((_Atomic int *)&x->refcount, 1); }

const int *kl_exec_live(kl_exec *x) {
  int *lv = atomic_load((_Atomic(int *) *)&x->live), n = x->nslots;
  if (lv) return lv;
  if (!(lv = malloc(sizeof(int) * (2 * (size_t)n + 1)))) return NULL;
  int *first = lv, *last = lv + n;
  for (int sl = 0; sl < n; sl++) first[sl] = INT_MAX, last[sl] = -1;
  for (int s = x->nsteps - 1; s >= 0; s--)
    for (int i = 0; i < x->steps[s].nslots; i++) first[x->steps[s].slots[i]] = s;
  for (int s = 0; s < x->nsteps; s++)
    for (int i = 0; i < x->steps[s].nslots; i++) last[x->steps[s].slots[i]] = s;
  for (int i = 0; i < x->noutputs; i++) last[x->out_slots[i]] = INT_MAX;
  for (int i = 0; i < x->ninputs; i++) first[x->in_slots[i]] = -1, last[x->in_slots[i]] = INT_MAX;
  int *expected = NULL; /* two threads: one table stays */
  if (!atomic_compare_exchange_strong((_Atomic(int *) *)&x->live, &expected, lv)) {
    free(lv);
    lv = expected;
  }
  return lv;
}

/* A slot's room in an arena (256-byte aligned, never empty). */
static size_t arena_room(const kl_exec *x, int sl) {
  return x->slot_bytes[sl] ? (x->slot_bytes[sl] + 255) & ~(size_t)255 : 256;
}

size_t kl_exec_arena_plan(kl_exec *x, const char *in_arena, size_t *off) {
  int n = x->nslots, *lo = malloc(sizeof(int) * (3 * (size_t)n + 1)), *hi = lo ? lo + n : NULL, *order = lo ? hi + n : NULL;
  const int *live = kl_exec_live(x);
  size_t total = 0;
  int m = 0; /* the slots placed */
  if (!lo || !live) goto out;
  for (int sl = 0; sl < n; sl++) { /* a slot no step uses (an output nobody writes): at the end */
    lo[sl] = live[sl] == INT_MAX ? x->nsteps : live[sl];
    hi[sl] = live[n + sl] < 0 ? lo[sl] : live[n + sl];
    off[sl] = 0;
    if (!in_arena || in_arena[sl]) order[m++] = sl;
  }
  for (int a = 1; a < m; a++) /* by size, largest first (insertion sort: a few hundred slots) */
    for (int b = a; b > 0 && x->slot_bytes[order[b]] > x->slot_bytes[order[b - 1]]; b--) {
      int t = order[b];
      order[b] = order[b - 1];
      order[b - 1] = t;
    }
  for (int k = 0; k < m; k++) {
    int sl = order[k];
    size_t room = arena_room(x, sl), at = 0;
    for (int moved = 1; moved;) { /* the lowest offset clear of every placed slot alive at the same time */
      moved = 0;
      for (int p = 0; p < k; p++) {
        int q = order[p];
        if (hi[q] < lo[sl] || hi[sl] < lo[q] || off[q] + arena_room(x, q) <= at || at + room <= off[q]) continue;
        at = off[q] + arena_room(x, q);
        moved = 1;
      }
    }
    off[sl] = at;
    if (at + room > total) total = at + room;
  }
out:
  free(lo);
  return total;
}

void kl_exec_release(kl_exec *x) {
  if (!x || atomic_fetch_sub((_Atomic int *)&x->refcount, 1) != 1) return;
  if (x->dev_state && devices[x->device]->exec_state_free) devices[x->device]->exec_state_free(x->dev_state);
  if (x->destroy) x->destroy(x->owner);
  for (int i = 0; i < x->nsteps; i++) free(x->steps[i].slots);
  free(x->steps);
  free(x->slot_bytes);
  free(x->in_slots);
  free(x->out_slots);
  free(x->donor);
  free(x->updates);
  free(x->live);
  free(x->temp_plan);
  free(x->host_steps);
  free(x);
}

/* The copy log's part at a call: an update that writes into its operand's buffer only when the
 * call donates that input, in a call that does not (logged once per update, or an error when
 * copies are forbidden). */
static int check_donated_updates(kl_exec *x, kl_buffer *const *preset, char *err, size_t errlen) {
  int mode = kl_copies_mode();
  for (int k = 0; mode && k < x->nupdates; k++) {
    kl_update *u = &x->updates[k];
    if (u->in_place || !u->donor_ok || (preset && preset[u->output])) continue;
    if (!(mode & KL_COPIES_FORBID) && atomic_exchange((_Atomic int *)&u->reported, 1)) continue;
    if (kl_copy_report(u->loc, u->prim, u->type, u->bytes, KL_COPY_NOT_DONATED, 0, err, errlen)) return -1;
  }
  return 0;
}

/* Where a launch runs: the device its committed inputs are on (all one), committed; with none,
 * device 0 of the kind, uncommitted. -1 with a message when committed inputs disagree. */
static int placement(const kl_exec *x, kl_buffer *const *inputs, int *ordinal, int *committed, char *err,
                     size_t errlen) {
  *ordinal = 0;
  *committed = 0;
  for (int i = 0; i < x->ninputs; i++) {
    if (!inputs[i]->committed) continue;
    if (*committed && inputs[i]->ordinal != *ordinal)
      return kl_error(err, errlen, KL_ERR_VALUE, "Received incompatible devices for a computation: an operand is "
                      "committed to device %d and another to device %d; move them to one device with device_put",
                      *ordinal, inputs[i]->ordinal);
    *ordinal = inputs[i]->ordinal;
    *committed = 1;
  }
  return 0;
}

/* Marks the new outputs of a launch on (ordinal, committed); an output that is an input's buffer
 * keeps its own placement. */
static void place_outputs(const kl_exec *x, kl_buffer *const *inputs, kl_buffer **outs, int ordinal, int committed) {
  for (int i = 0; i < x->noutputs; i++) {
    int is_input = 0;
    for (int k = 0; k < x->ninputs && !is_input; k++) is_input = outs[i] == inputs[k];
    if (is_input) continue;
    outs[i]->ordinal = ordinal;
    outs[i]->committed = committed;
  }
}

int kl_exec_launch(kl_exec *x, kl_buffer **inputs, kl_buffer **outs, char *err, size_t errlen) {
  return kl_exec_launch_into(x, inputs, NULL, outs, err, errlen);
}

static inline __attribute__((always_inline)) int launch_into(kl_exec *x, kl_buffer **inputs, kl_buffer *const *preset,
                                                             kl_buffer **outs, char *err, size_t errlen) {
  int ordinal, committed;
  if (placement(x, inputs, &ordinal, &committed, err, errlen)) return -1;
  if (x->nupdates && check_donated_updates(x, preset, err, errlen)) return -1;
  const kl_device *d = devices[x->device];
  int old = d->use_ordinal ? d->use_ordinal(ordinal) : 0, rc = d->launch(x, inputs, preset, outs, err, errlen);
  if (d->use_ordinal) d->use_ordinal(old);
  if (rc) return -1;
  if (ordinal || committed) place_outputs(x, inputs, outs, ordinal, committed);
  return 0;
}

/* The profiler's launch event (profile.h): x's name, how many steps it queued and where; `id` tags
 * the device work it queued (CUPTI's records, the CPU executor's run). */
static void trace_launch(const kl_exec *x, uint64_t t0, uint64_t id, int participants, int rc) {
  int libs = 0; /* (GPU executables mark their library calls; the CPU's run inside its steps) */
  for (int s = 0; s < x->nsteps; s++) libs += x->steps[s].is_library;
  char gpu[48] = "";
  if (x->device == KL_DEV_CUDA) snprintf(gpu, sizeof gpu, ", \"library_calls\": %d", libs);
  kl_prof_add("launch", x->name[0] ? x->name : "program", t0, kl_prof_now(), id,
               "\"steps\": %d, \"device\": \"%s\", \"participants\": %d%s%s", x->nsteps, devices[x->device]->name,
               participants, gpu, rc ? ", \"failed\": true" : "");
}

/* A launch while a trace records: timed, its device work tagged with its id. */
static __attribute__((noinline, cold)) int launch_traced(kl_exec *x, kl_buffer **inputs, kl_buffer *const *preset, kl_buffer **outs, char *err,
                         size_t errlen) {
  uint64_t t0 = kl_prof_now(), id = kl_prof_next_id(), outer = kl_prof_current_launch();
  kl_prof_set_current_launch(id);
  int pushed = kl_cupti_push(id);
  int rc = launch_into(x, inputs, preset, outs, err, errlen);
  kl_cupti_pop(pushed);
  kl_prof_set_current_launch(outer);
  trace_launch(x, t0, id, 1, rc);
  return rc;
}

int kl_exec_launch_into(kl_exec *x, kl_buffer **inputs, kl_buffer *const *preset, kl_buffer **outs, char *err,
                        size_t errlen) {
  if (kl_prof_on()) return launch_traced(x, inputs, preset, outs, err, errlen); /* (the one branch when off) */
  return launch_into(x, inputs, preset, outs, err, errlen);
}

static inline __attribute__((always_inline)) int launch_group(kl_exec *x, int n, const int *ordinals, const kl_span *span, kl_buffer **inputs,
                        kl_buffer **outs, char *err, size_t errlen) {
  const kl_device *d = devices[x->device];
  if (n < 1) return kl_error(err, errlen, KL_ERR_VALUE, "an SPMD launch needs at least one participant");
  if (!d->launch_group)
    return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "launching one program on several %s devices is not supported yet "
                    "by kiln", d->name);
  if (x->nupdates && check_donated_updates(x, NULL, err, errlen)) return -1;
  if (span && (span->size < n || !span->ranks || !span->procs))
    return kl_error(err, errlen, KL_ERR_VALUE, "an SPMD launch of %d participants in a group of %d", n, span->size);
  if (d->launch_group(x, n, ordinals, span, inputs, outs, err, errlen)) return -1;
  for (int p = 0; p < n; p++)
    place_outputs(x, inputs + (size_t)p * (size_t)x->ninputs, outs + (size_t)p * (size_t)x->noutputs, ordinals[p], 1);
  return 0;
}

static __attribute__((noinline, cold)) int launch_group_traced(kl_exec *x, int n, const int *ordinals,
                                                                const kl_span *span, kl_buffer **inputs,
                                                                kl_buffer **outs, char *err, size_t errlen) {
  uint64_t t0 = kl_prof_now(), id = kl_prof_next_id(), outer = kl_prof_current_launch();
  kl_prof_set_current_launch(id);
  int pushed = kl_cupti_push(id); /* (the participants queued on other threads go untagged) */
  int rc = launch_group(x, n, ordinals, span, inputs, outs, err, errlen);
  kl_cupti_pop(pushed);
  kl_prof_set_current_launch(outer);
  trace_launch(x, t0, id, n, rc);
  return rc;
}

int kl_exec_launch_group(kl_exec *x, int n, const int *ordinals, const kl_span *span, kl_buffer **inputs,
                         kl_buffer **outs, char *err, size_t errlen) {
  if (kl_prof_on()) return launch_group_traced(x, n, ordinals, span, inputs, outs, err, errlen);
  return launch_group(x, n, ordinals, span, inputs, outs, err, errlen);
}

void kl_exec_wait_callbacks(const kl_exec *x) {
  if (x->callbacks && x->device == KL_DEV_CPU && devices[KL_DEV_CPU]) devices[KL_DEV_CPU]->synchronize();
}

void kl_rt_synchronize(void) {
  for (int k = 0; k < KL_DEV_COUNT; k++)
    if (devices[k] && devices[k]->available(NULL, 0)) devices[k]->synchronize();
}

/* ---- bindings (a loop body's executable bound to memory) ---- */

void kl_binding_free(kl_binding *b) {
  free(b->args);
  free(b->bytes);
  free(b->first);
  free(b->tmp);
  free(b->temp);
  free(b->outs);
  free(b->late_dst);
  free(b->late_src);
  free(b->late_bytes);
  memset(b, 0, sizeof *b);
}

/* mask[slot]: whether x's slot needs a temporary (no input or output is there). */
static void temp_mask(const kl_exec *x, char *mask) {
  memset(mask, 1, (size_t)x->nslots);
  for (int i = 0; i < x->ninputs; i++) mask[x->in_slots[i]] = 0;
  for (int i = 0; i < x->noutputs; i++) mask[x->out_slots[i]] = 0;
}

void *kl_binding_new(size_t size, const kl_exec *x, char *err, size_t errlen) {
  kl_binding *b = calloc(1, size);
  if (!b) {
    kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory binding a loop body");
    return NULL;
  }
  if (kl_binding_init(b, x, err, errlen)) {
    free(b);
    return NULL;
  }
  return b;
}

int kl_binding_init(kl_binding *b, const kl_exec *x, char *err, size_t errlen) {
  size_t nargs = 0;
  for (int s = 0; s < x->nsteps; s++) nargs += (size_t)x->steps[s].nslots;
  memset(b, 0, sizeof *b);
  b->x = x;
  b->args = malloc(sizeof(void *) * (nargs + 1));
  b->bytes = malloc(sizeof(size_t) * (nargs + 1));
  b->first = malloc(sizeof(int) * ((size_t)x->nsteps + 1));
  b->tmp = calloc(2 * (size_t)x->nslots + 1, sizeof(void *));
  b->outs = malloc(sizeof(void *) * (2 * (size_t)x->noutputs + 1));
  b->late_dst = malloc(sizeof(void *) * ((size_t)x->noutputs + 1));
  b->late_src = malloc(sizeof(void *) * ((size_t)x->noutputs + 1));
  b->late_bytes = malloc(sizeof(size_t) * ((size_t)x->noutputs + 1));
  b->temp = malloc((size_t)x->nslots + 1);
  if (!b->args || !b->bytes || !b->first || !b->tmp || !b->outs || !b->late_dst || !b->late_src || !b->late_bytes ||
      !b->temp) {
    kl_binding_free(b);
    return kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory binding a loop body");
  }
  b->at = b->tmp + x->nslots;
  temp_mask(x, b->temp);
  return 0;
}

const kl_temp_plan *kl_exec_temp_plan(kl_exec *x) {
  void **state = &x->temp_plan;
  kl_temp_plan *p = atomic_load((_Atomic(void *) *)state);
  if (p) return p->bytes ? p : NULL;
  int n = x->nslots, any = 0;
  const int *live = kl_exec_live(x);
  if (!live || !(p = calloc(1, sizeof *p + (sizeof(size_t) + 1) * ((size_t)n + 1)))) {
    free(p);
    return NULL; /* out of host memory: temporaries one by one, this time */
  }
  p->off = (size_t *)(p + 1);
  p->in = (char *)(p->off + n + 1);
  temp_mask(x, p->in);
  for (int sl = 0; sl < n; sl++) any |= p->in[sl] &= live[sl] != INT_MAX && x->slot_bytes[sl] > 0;
  p->bytes = any ? kl_exec_arena_plan(x, p->in, p->off) : 0;
  void *expected = NULL; /* two threads: one plan stays */
  if (!atomic_compare_exchange_strong((_Atomic(void *) *)state, &expected, p)) {
    free(p);
    p = expected;
  }
  return p->bytes ? p : NULL;
}

size_t kl_exec_temp_bytes(const kl_exec *x) {
  char *mask = malloc((size_t)x->nslots + 1);
  size_t n = 0;
  if (!mask) return SIZE_MAX; /* as if too large to keep */
  temp_mask(x, mask);
  for (int sl = 0; sl < x->nslots; sl++)
    if (mask[sl]) n += x->slot_bytes[sl];
  free(mask);
  return n;
}

int kl_binding_is_temp(const kl_binding *b, int sl) { return b->temp[sl]; }

void kl_binding_point(kl_binding *b, void *const *in, void *const *out) {
  const kl_exec *x = b->x;
  void **at = b->at;
  memcpy(at, b->tmp, sizeof(void *) * (size_t)x->nslots);
  for (int i = 0; i < x->ninputs; i++)
    if (!at[x->in_slots[i]]) at[x->in_slots[i]] = in[i];
  for (int i = 0; i < x->noutputs; i++) /* written straight into the caller's memory */
    if (!at[x->out_slots[i]]) at[x->out_slots[i]] = out[i];
  size_t k = 0;
  for (int s = 0; s < x->nsteps; s++) {
    const kl_step *st = &x->steps[s];
    b->first[s] = (int)k;
    for (int i = 0; i < st->nslots; i++, k++) {
      b->args[k] = at[st->slots[i]];
      b->bytes[k] = x->slot_bytes[st->slots[i]];
    }
  }
  b->nlate = 0;
  for (int i = 0; i < x->noutputs; i++) {
    b->outs[2 * i] = out[i];
    b->outs[2 * i + 1] = at[x->out_slots[i]];
    if (at[x->out_slots[i]] != out[i]) {
      b->late_dst[b->nlate] = out[i];
      b->late_src[b->nlate] = at[x->out_slots[i]];
      b->late_bytes[b->nlate++] = x->slot_bytes[x->out_slots[i]];
    }
  }
}
