/* libfind.c: see libfind.h. */
#define _GNU_SOURCE
#include "libfind.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

int kl_libfind_add(kl_libfind *f, const char *path) {
  pthread_mutex_lock(&f->mu);
  int ok = f->nextra < 8;
  if (ok) snprintf(f->extra[f->nextra++], sizeof f->extra[0], "%s", path);
  pthread_mutex_unlock(&f->mu);
  return ok;
}

void *kl_libfind_open(kl_libfind *f, const char *path) {
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (h) snprintf(f->path, sizeof f->path, "%s", path);
  return h;
}
