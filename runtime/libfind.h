/* libfind.h: finding a library kiln opens at run time (dlopen, never linked): the candidate
 * paths python/ or the runtime registers for it (a wheel's file or folder) and the path the
 * search opened. One per library: cuBLAS, cuFFT, cuSOLVER, cuDNN. */
#ifndef KL_LIBFIND_H
#define KL_LIBFIND_H
#include <pthread.h>

typedef struct {
  pthread_mutex_t mu;  /* guards extra/nextra */
  char extra[8][512];  /* registered candidates, tried after the standard names */
  int nextra;
  char path[512];      /* what kl_libfind_open last opened */
} kl_libfind;

#define KL_LIBFIND_INIT {.mu = PTHREAD_MUTEX_INITIALIZER}

/* Records a candidate file or folder: 1, or 0 when the list is full. */
int kl_libfind_add(kl_libfind *f, const char *path);
/* dlopen(path) (RTLD_NOW | RTLD_LOCAL); on success f->path names it. NULL if it does not open. */
void *kl_libfind_open(kl_libfind *f, const char *path);
#endif
