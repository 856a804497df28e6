/* status.h: kiln's one error path. A failing core function writes its message into the
 * caller's buffer through kl_error, which also records the kind of failure (a kl_status) for
 * this thread; the Python extension maps that status to an exception class, never the text.
 * Depends on nothing but the C library. */
#ifndef KL_STATUS_H
#define KL_STATUS_H
#include <stdarg.h>
#include <stddef.h>

typedef enum {
  KL_OK = 0,
  KL_ERR_TYPE,        /* a dtype or operand kind is wrong (TypeError) */
  KL_ERR_VALUE,       /* a shape, axis or parameter value is wrong (ValueError) */
  KL_ERR_INDEX,       /* an index is out of range (IndexError) */
  KL_ERR_UNSUPPORTED, /* a valid request kiln cannot do yet (NotImplementedError) */
  KL_ERR_NOMEM,       /* an allocation failed (MemoryError); the library stays usable */
  KL_ERR_INTERNAL,    /* a broken invariant or a failing library (RuntimeError) */
  KL_ERR_COPY,        /* an update would copy while copies are forbidden (kiln.errors.CopyError) */
  KL_ERR_INTERRUPTED  /* a run stopped at a stop request: Ctrl-C (KeyboardInterrupt) */
} kl_status;

/* Writes the message into buf (len bytes), records status as this thread's last one; returns
 * -1, so a failing function can `return kl_error(...)`. */
int kl_error(char *buf, size_t len, kl_status status, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
int kl_verror(char *buf, size_t len, kl_status status, const char *fmt, va_list ap);
/* The sticky form for builders that keep going after a failure (their varargs fail helpers call
 * it): only the first failure (while *failed is 0) writes its message and status; sets *failed;
 * returns -1. */
int kl_verror_once(int *failed, char *buf, size_t len, kl_status status, const char *fmt, va_list ap);
/* This thread's last status since kl_status_clear (KL_OK if none). */
kl_status kl_status_last(void);
void kl_status_clear(void);
#endif
