/* arena.c: bump allocator in 64 KiB (or larger) blocks. */
#include "arena.h"

#include "alloc.h"
#include <stdlib.h>
#include <string.h>

struct kl_arena_block {
  kl_arena_block *next;
  size_t used, cap;
  _Alignas(16) unsigned char data[];
};

void kl_arena_init(kl_arena *a) { a->head = NULL; }

void *kl_arena_alloc(kl_arena *a, size_t n) {
  n = (n + 15) & ~(size_t)15;
  kl_arena_block *b = a->head;
  if (!b || b->used + n > b->cap) {
    size_t cap = n > 65536 ? n : 65536;
    b = kl_malloc(sizeof *b + cap);
    if (!b) return NULL;
    b->used = 0;
    b->cap = cap;
    b->next = a->head;
    a->head = b;
  }
  void *p = b->data + b->used;
  b->used += n;
  memset(p, 0, n);
  return p;
}

void *kl_arena_dup(kl_arena *a, const void *p, size_t n) {
  void *q = kl_arena_alloc(a, n ? n : 1);
  if (q && n) memcpy(q, p, n);
  return q;
}

void kl_arena_free(kl_arena *a) {
  while (a->head) {
    kl_arena_block *n = a->head->next;
    free(a->head);
    a->head = n;
  }
}
