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
#include "ptxas.h"

int main(void) {
  const char *ptx = kl_cusolver_ptx();
  CHECK(strstr(ptx, ".entry kl_sol_strided") && strstr(ptx, ".entry kl_sol_fix") && strstr(ptx, ".entry kl_sol_perm") &&
            strstr(ptx, ".entry kl_sol_ptrs"),
        "the cuSOLVER helper kernels' PTX lacks an entry");
  const char *ptxas = find_ptxas();
  if (!ptxas) {
    printf("no ptxas here: the cuSOLVER helper kernels' PTX is not assembled\n");
    return failures != 0;
  }
  assemble("the cuSOLVER helper kernels", ptx, ptxas);
  return failures != 0;
}
