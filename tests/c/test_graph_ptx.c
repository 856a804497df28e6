/* test_graph_ptx.c: the PTX kiln writes by hand for its CUDA graphs (the while loop's trip end,
 * a branch's condition setter, a scan's slice movers) and for the peer all-reduce's sums
 * (runtime/peer.c) assembles with ptxas for sm_90, where a
 * ptxas is found (on PATH or in /usr/local/cuda/bin); otherwise the test says so and passes. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../runtime/cuda.h"
#include "../../runtime/peer.h"
#include "check.h"

static int assemble(const char *what, const char *ptx, const char *ptxas) {
  char src[] = "/tmp/kl_graph_ptx_XXXXXX";
  int fd = mkstemp(src);
  CHECK(fd >= 0, "mkstemp failed");
  if (fd < 0) return 1;
  FILE *f = fdopen(fd, "w");
  fputs(ptx, f);
  fclose(f);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "%s -arch=sm_90 %s -o /dev/null", ptxas, src);
  int rc = system(cmd);
  CHECK(rc == 0, "ptxas rejected %s's PTX (%s)", what, cmd);
  unlink(src);
  printf("%s: the PTX assembles (%zu bytes)\n", what, strlen(ptx));
  return rc;
}

int main(void) {
  const char *ptx = kl_cuda_graph_ptx();
  CHECK(strstr(ptx, ".entry kl_while_next") && strstr(ptx, ".entry kl_if_set") && strstr(ptx, ".entry kl_scan_in") &&
            strstr(ptx, ".entry kl_scan_out"),
        "the graph kernels' PTX lacks an entry");
  CHECK(strstr(kl_peer_ptx(), ".entry kl_peer_add_f32") && strstr(kl_peer_ptx(), ".entry kl_peer_add_f64"),
        "the peer all-reduce's PTX lacks an entry");
  const char *ptxas = !system("command -v ptxas >/dev/null 2>&1") ? "ptxas"
                      : !access("/usr/local/cuda/bin/ptxas", X_OK) ? "/usr/local/cuda/bin/ptxas"
                                                                  : NULL;
  if (!ptxas) {
    printf("no ptxas here: the hand-written kernels' PTX is not assembled\n");
    return failures != 0;
  }
  assemble("the graph kernels", ptx, ptxas);
  assemble("the peer all-reduce", kl_peer_ptx(), ptxas);
  return failures != 0;
}
