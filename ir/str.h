/* str.h: growable NUL-terminated text buffer (printer, MLIR writer, error text). */
#ifndef KL_STR_H
#define KL_STR_H
#include <stdarg.h>
#include <stddef.h>

typedef struct {
  char *data; /* NUL-terminated text, owned (NULL until something is written) */
  size_t len; /* bytes used, excluding the NUL */
  size_t cap; /* bytes allocated */
  int failed; /* an allocation failed (ir/alloc.h): the text is incomplete; later writes are dropped */
} kl_str;

/* Writers never fail: a failed allocation sets s->failed, which whoever consumes the text checks
 * (KL_ERR_NOMEM). */
void kl_str_init(kl_str *s);
void kl_str_free(kl_str *s);
void kl_str_clear(kl_str *s);
void kl_str_append(kl_str *s, const char *text);
void kl_str_printf(kl_str *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void kl_str_vprintf(kl_str *s, const char *fmt, va_list ap);
#endif
