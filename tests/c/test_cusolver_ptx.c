/* test_cusolver_ptx.c: the PTX kiln writes by hand around cuSOLVER (runtime/cusolver_ptx.c: the
 * strided/transposing copy, the devInfo NaN and triangle fix-up, pivots to permutation, pointer
 * arrays) assembles with ptxas for sm_90, where a ptxas is found (on PATH or in
 * /usr/local/cuda/bin); otherwise the test says so and passes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../runtime/cusolver.h"
#include "check.h"

int main(void) {
  const char *ptx = kl_cusolver_ptx();
  CHECK(strstr(ptx, ".entry kl_sol_strided") && strstr(ptx, ".entry kl_sol_fix") && strstr(ptx, ".entry kl_sol_perm") &&
            strstr(ptx, ".entry kl_sol_ptrs"),
        "the cuSOLVER helper kernels' PTX lacks an entry");
  const char *ptxas = !system("command -v ptxas >/dev/null 2>&1") ? "ptxas"
                      : !access("/usr/local/cuda/bin/ptxas", X_OK) ? "/usr/local/cuda/bin/ptxas"
                                                                  : NULL;
  if (!ptxas) {
    printf("no ptxas here: the cuSOLVER helper kernels' PTX is not assembled\n");
    return failures != 0;
  }
  char src[] = "/tmp/kl_cusolver_ptx_XXXXXX";
  int fd = mkstemp(src);
  CHECK(fd >= 0, "mkstemp failed");
  if (fd < 0) return 1;
  FILE *f = fdopen(fd, "w");
  fputs(ptx, f);
  fclose(f);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "%s -arch=sm_90 %s -o /dev/null", ptxas, src);
  int rc = system(cmd);
  CHECK(rc == 0, "ptxas rejected the cuSOLVER helper kernels' PTX (%s)", cmd);
  unlink(src);
  printf("the cuSOLVER helper kernels' PTX assembles (%zu bytes)\n", strlen(ptx));
  return failures != 0;
}
