/* status.c: the one error path (status.h): messages into the caller's buffer, the status in a
 * thread-local slot. Depends on nothing but the C library. */
#include "status.h"

#include <stdio.h>

static _Thread_local kl_status last;

int kl_verror(char *buf, size_t len, kl_status status, const char *fmt, va_list ap) {
  if (buf && len) vsnprintf(buf, len, fmt, ap);
  last = status;
  return -1;
}

int kl_error(char *buf, size_t len, kl_status status, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  kl_verror(buf, len, status, fmt, ap);
  va_end(ap);
  return -1;
}

int kl_verror_once(int *failed, char *buf, size_t len, kl_status status, const char *fmt, va_list ap) {
  if (!*failed) kl_verror(buf, len, status, fmt, ap);
  *failed = 1;
  return -1;
}


kl_status kl_status_last(void) { return last; }

void kl_status_clear(void) { last = KL_OK; }

