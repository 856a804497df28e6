/* ptxas.h: assembling the PTX kiln writes by hand, for the C tests of those kernels: where ptxas is
 * (on PATH or in /usr/local/cuda/bin; NULL: none here, and the tests say so and pass), and one
 * PTX text assembled for sm_90, a failure recorded through check.h's CHECK. */
#ifndef KL_TEST_PTXAS_H
#define KL_TEST_PTXAS_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static inline const char *find_ptxas(void) {
  return !system("command -v ptxas >/dev/null 2>&1") ? "ptxas"
         : !access("/usr/local/cuda/bin/ptxas", X_OK) ? "/usr/local/cuda/bin/ptxas"
                                                     : NULL;
}

/* ptx assembled by ptxas (what: the kernels' name, for the messages): 0, or nonzero (recorded). */
static inline int assemble(const char *what, const char *ptx, const char *ptxas) {
  char src[] = "/tmp/kl_ptx_XXXXXX";
  int fd = mkstemp(src);
  CHECK(fd >= 0, "mkstemp failed");
  if (fd < 0) return 1;
  FILE *f = fdopen(fd, "w");
  fputs(ptx, f);
  fclose(f);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "%s -arch=sm_90 %s -o /dev/null", ptxas, src);
  int rc = system(cmd);
  CHECK(rc == 0, "ptxas rejected the PTX of %s (%s)", what, cmd);
  unlink(src);
  printf("%s: the PTX assembles (%zu bytes)\n", what, strlen(ptx));
  return rc;
}
#endif
