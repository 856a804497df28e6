/* peer.h: the sum of an array over two GPUs of this process on their copy engines (runtime/peer.c),
 * in place of NCCL's all-reduce for big float operands. Knows nothing of the IR beyond dtypes. */
#ifndef KL_PEER_H
#define KL_PEER_H
#include <stddef.h>

#include "../ir/dtype.h"
#include "collective.h"

/* Whether the all-reduce of `bytes` bytes of dt over GPUs ords[0..g) (member order) goes this
 * way: two GPUs that reach each other's memory, float32 or float64, at least
 * KILN_PEER_ALLREDUCE_MIB MiB (default 4; 0: never), not while the queue is captured into a graph
 * (a loop's body). Every member decides the same. */
int kl_peer_all_reduce_ok(const int *ords, int g, kl_dtype dt, size_t bytes);
/* Queues dst = src + the other member's src (count elements of dt) on the thread's queue, for
 * member pos (0 or 1) of the pair ords, running as participant `rank` of launch group grp, the
 * other member being participant other_rank. Both members must call it for the same collective;
 * dst may be src. 0, or -1 with a message. */
int kl_peer_all_reduce(kl_coll_group *grp, int rank, int other_rank, const int *ords, int pos, const void *src,
                       void *dst, size_t count, kl_dtype dt, char *err, size_t errlen);
/* The add kernels' PTX (ptxas checks it in tests/c/test_graph_ptx.c). */
const char *kl_peer_ptx(void);
#endif
