/* str.c: growable text buffer. */
#include "str.h"

#include "alloc.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
void kl_str_init(kl_str *s) {
  s->data = NULL;
  s->len = s->cap = 0;
  s->failed = 0;
}
void kl_str_free(kl_str *s) { free(s->data); kl_str_init(s); }
void kl_str_clear(kl_str *s) { s->len = 0; if (s->data) s->data[0] = 0; }

/* 0 when extra more bytes fit; -1 (and s->failed) when they cannot be allocated. */
static int reserve(kl_str *s, size_t extra) {
  if (s->failed) return -1;
  if (s->len + extra + 1 <= s->cap) return 0;
  size_t cap = s->cap ? s->cap : 256;
  while (cap < s->len + extra + 1) cap *= 2;
  char *p = kl_realloc(s->data, cap);
  if (!p) {
    s->failed = 1;
    return -1;
  }
  s->data = p;
  s->cap = cap;
  return 0;
}

void kl_str_append(kl_str *s, const char *text) {
  size_t n = strlen(text);
  if (reserve(s, n)) return;
  memcpy(s->data + s->len, text, n + 1);
  s->len += n;
}

void kl_str_vprintf(kl_str *s, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0 || reserve(s, (size_t)n)) return;
  vsnprintf(s->data + s->len, (size_t)n + 1, fmt, ap);
  s->len += (size_t)n;
}

void kl_str_printf(kl_str *s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kl_str_vprintf(s, fmt, ap);
  va_end(ap);
}

