/* alloc.h: the one allocation hook of kiln's core (ir, tracer, transforms, codegen). Every
 * allocation goes through these, so a test can make any one of them fail; a failed allocation
 * comes back NULL and its caller reports KL_ERR_NOMEM (ir/status.h) instead of aborting, and the
 * library keeps working. Depends on nothing but the C library. */
#ifndef KL_ALLOC_H
#define KL_ALLOC_H
#include <stddef.h>

void *kl_malloc(size_t n);
void *kl_calloc(size_t n, size_t size);
void *kl_realloc(void *p, size_t n);

/* Test hook: the nth allocation from now (n >= 1) fails, once; n = 0 disarms. */
void kl_alloc_fail_at(long n);
/* Allocations made through the hook so far (to size a sweep). */
long kl_alloc_count(void);
#endif
