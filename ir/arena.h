/* arena.h: bump allocator; everything in a Program lives in one arena, freed whole. */
#ifndef KL_ARENA_H
#define KL_ARENA_H
#include <stddef.h>

typedef struct kl_arena_block kl_arena_block;
typedef struct {
  kl_arena_block *head; /* newest block first */
} kl_arena;

void kl_arena_init(kl_arena *a);
/* zeroed, 16-byte aligned; NULL when out of memory (ir/alloc.h) */
void *kl_arena_alloc(kl_arena *a, size_t n);
void *kl_arena_dup(kl_arena *a, const void *p, size_t n); /* NULL when out of memory */
void kl_arena_free(kl_arena *a);
#endif
