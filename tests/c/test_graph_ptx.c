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
#include "ptxas.h"

int main(void) {
  const char *ptx = kl_cuda_graph_ptx();
  CHECK(strstr(ptx, ".entry kl_while_next") && strstr(ptx, ".entry kl_if_set") && strstr(ptx, ".entry kl_scan_in") &&
            strstr(ptx, ".entry kl_scan_out"),
        "the graph kernels' PTX lacks an entry");
  CHECK(strstr(kl_peer_ptx(), ".entry kl_peer_add_f32") && strstr(kl_peer_ptx(), ".entry kl_peer_add_f64"),
        "the peer all-reduce's PTX lacks an entry");
  const char *ptxas = find_ptxas();
  if (!ptxas) {
    printf("no ptxas here: the hand-written kernels' PTX is not assembled\n");
    return failures != 0;
  }
  assemble("the graph kernels", ptx, ptxas);
  assemble("the peer all-reduce", kl_peer_ptx(), ptxas);
  return failures != 0;
}
