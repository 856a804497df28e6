/* nccl.h: collectives between GPUs through NCCL, opened at run time (libnccl.so.2): one
 * communicator per GPU of a device set (ncclCommInitAll; ncclCommInitRank for a group whose GPUs
 * are in several processes), cached per set; each operation enqueued
 * on the stream of its device's launch. For the GPU half of runtime/collective.h's rendezvous
 * (simulated CPU devices exchange pointers in process instead). Driven by codegen/lower/collective.c for
 * the participants of a CUDA SPMD launch (runtime/cuda.c, one thread per GPU). Knows nothing of the IR, MLIR or Python. */
#ifndef KL_NCCL_H
#define KL_NCCL_H
#include <stddef.h>
#include <stdint.h>

/* Element types and reductions, NCCL's numbering (ncclDataType_t, ncclRedOp_t). */
enum { KL_NCCL_I8 = 0, KL_NCCL_U8 = 1, KL_NCCL_I32 = 2, KL_NCCL_U32 = 3, KL_NCCL_I64 = 4, KL_NCCL_U64 = 5,
       KL_NCCL_F16 = 6, KL_NCCL_F32 = 7, KL_NCCL_F64 = 8, KL_NCCL_BF16 = 9 };
enum { KL_NCCL_SUM = 0, KL_NCCL_PROD = 1, KL_NCCL_MAX = 2, KL_NCCL_MIN = 3 };

/* Opens NCCL (once; sets NCCL_NVLS_ENABLE=0 first unless the environment sets it): 1, or 0 with
 * the reason in why. KILN_NCCL_LIB=path wins; otherwise the newest (ncclGetVersion) of the
 * system's libnccl.so.2 and the files registered with kl_nccl_add_search_path. */
int kl_nccl_available(char *why, size_t n);
/* Records a candidate libnccl.so.2 (a wheel's): 1, or 0 when the list is full. */
int kl_nccl_add_search_path(const char *path);
/* The path opened ("" before or without one) and its version (NCCL's number, 22703 = 2.27.3). */
const char *kl_nccl_library(int *version);

/* The communicators of the GPUs ordinals[0..n) (borrowed, cached for the process's life): rank r
 * is ordinals[r]. NULL with a message. */
typedef struct kl_nccl_comms kl_nccl_comms;
const kl_nccl_comms *kl_nccl_comms_for(const int *ordinals, int n, char *err, size_t errlen);

/* A group spanning processes (one communicator per group, its ranks in several processes, made
 * with ncclCommInitRank): kl_nccl_unique_id writes a new group's 128-byte id (its first rank makes
 * it, the others receive it); kl_nccl_span_join makes rank pos's communicator of the group keyed
 * by key[0..n) (its members' global ranks), blocking until every rank joins; kl_nccl_span_find
 * returns the set once rank pos has joined (NULL before). Sets are cached for the process's life;
 * the set's other ranks' communicators are NULL unless this process runs them too. */
int kl_nccl_unique_id(void *id, char *err, size_t errlen);
const kl_nccl_comms *kl_nccl_span_join(const int64_t *key, int n, int pos, const void *id, char *err, size_t errlen);
const kl_nccl_comms *kl_nccl_span_find(const int64_t *key, int n, int pos);

/* Rank `rank`'s part of a collective, enqueued on `stream` (a CUstream). 0, or -1 with a message. */
int kl_nccl_all_reduce(const kl_nccl_comms *c, int rank, const void *send, void *recv, size_t count, int dtype,
                       int op, void *stream, char *err, size_t errlen);
int kl_nccl_all_gather(const kl_nccl_comms *c, int rank, const void *send, void *recv, size_t send_count, int dtype,
                       void *stream, char *err, size_t errlen);
int kl_nccl_reduce_scatter(const kl_nccl_comms *c, int rank, const void *send, void *recv, size_t recv_count,
                           int dtype, int op, void *stream, char *err, size_t errlen);
/* ppermute: sends to `to` (-1: none) and receives from `from` (-1: none) in one NCCL group. */
int kl_nccl_send_recv(const kl_nccl_comms *c, int rank, const void *send, int to, void *recv, int from, size_t count,
                      int dtype, void *stream, char *err, size_t errlen);
/* all_to_all: block k of send (count elements each) to rank k, rank k's block for this rank into
 * block k of recv, as send/recv pairs in one NCCL group. */
int kl_nccl_all_to_all(const kl_nccl_comms *c, int rank, const void *send, void *recv, size_t count, int dtype,
                       void *stream, char *err, size_t errlen);
#endif
