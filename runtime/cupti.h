/* cupti.h: what the GPU ran, through NVIDIA's CUPTI activity API (libcupti, opened at run time,
 * never linked: $KILN_CUPTI_LIB, the system's, $CUDA_HOME's or /usr/local/cuda's, or a path
 * python/ registers such as the nvidia-cuda-cupti wheel's): while collection is on, every kernel,
 * copy and memset with its device start and end moved into the host trace clock (profile.h), and
 * the kiln launch that queued it. Knows nothing of the IR, MLIR or Python. */
#ifndef KL_CUPTI_H
#define KL_CUPTI_H
#include <stddef.h>
#include <stdint.h>

typedef enum { KL_CUPTI_KERNEL = 0, KL_CUPTI_MEMCPY = 1, KL_CUPTI_MEMSET = 2 } kl_cupti_kind;

/* One piece of work the GPU ran. */
typedef struct {
  int kind;               /* kl_cupti_kind */
  uint64_t start, end;    /* kl_prof_now's clock, nanoseconds */
  uint32_t device;        /* CUDA device id */
  uint32_t stream;        /* CUPTI's stream id */
  uint32_t correlation;   /* CUPTI's id of the driver call that queued it */
  uint64_t launch;        /* the kiln launch (kl_prof_next_id) that queued it, or 0 */
  uint64_t bytes;         /* copies and memsets */
  int copy_kind;          /* copies: CUPTI's kind (1 host to device, 2 device to host, 8 device to
                             device, 10 peer to peer, ...) */
  int grid[3], block[3];  /* kernels */
  char name[224];         /* kernels: the function's name (demangled where it can be) */
} kl_cupti_record;

/* Records a candidate file or folder for libcupti: 1, or 0 when the list is full. */
int kl_cupti_add_search_path(const char *path);
/* Starts collecting (the library opened on first use): 0, or -1 with why not in `why` (no
 * libcupti, another profiler owns CUPTI, ...). Records of an earlier collection are dropped. */
int kl_cupti_start(char *why, size_t whylen);
/* Stops collecting: flushes CUPTI's buffers (the caller waits for the GPU first) and turns the
 * activity kinds off. The records stay until taken. */
void kl_cupti_stop(void);
/* The records collected (owned by the caller: free()), *n of them, *dropped the ones CUPTI or
 * kiln could not keep; the store is left empty. */
kl_cupti_record *kl_cupti_take(size_t *n, size_t *dropped);
/* Around a launch queued on this thread while collecting: the GPU work its driver calls queue is
 * tagged with `launch` (CUPTI's external correlation). push returns whether it tagged (0 while not
 * collecting); pop takes that answer. */
int kl_cupti_push(uint64_t launch);
void kl_cupti_pop(int pushed);
/* The path of the libcupti opened, or "" before one was. */
const char *kl_cupti_library(void);
#endif
