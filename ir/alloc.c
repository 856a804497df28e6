/* alloc.c: the allocation hook (alloc.h): malloc and friends, with a countdown a test can arm
 * to make the nth allocation fail. Depends on nothing but the C library. */
#include "alloc.h"

#include <stdatomic.h>
#include <stdlib.h>

static atomic_long countdown; /* > 0: the allocation that brings it to 0 fails */
static atomic_long counted;

static int should_fail(void) {
  atomic_fetch_add_explicit(&counted, 1, memory_order_relaxed);
  if (atomic_load_explicit(&countdown, memory_order_relaxed) <= 0) return 0;
  return atomic_fetch_sub(&countdown, 1) == 1;
}

void *kl_malloc(size_t n) { return should_fail() ? NULL : malloc(n ? n : 1); }

void *kl_calloc(size_t n, size_t size) { return should_fail() ? NULL : calloc(n ? n : 1, size ? size : 1); }

void *kl_realloc(void *p, size_t n) { return should_fail() ? NULL : realloc(p, n ? n : 1); }

void kl_alloc_fail_at(long n) { atomic_store(&countdown, n > 0 ? n : 0); }

long kl_alloc_count(void) { return atomic_load(&counted); }
