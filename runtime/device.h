/* device.h: the device interface. Each device kind (runtime/cpu.c, runtime/cuda.c) fills one
 * kl_device table; buffers, launches, transfers and synchronization dispatch through the table
 * of the device a buffer's memory or an executable's code lives on (runtime/device.c). Knows
 * nothing of the IR, MLIR or Python, nor of any device's own API (CUDA's is runtime/cuda.h). */
#ifndef KL_DEVICE_H
#define KL_DEVICE_H
#include <stddef.h>

#include "runtime.h"

/* A device's memory, as Device.memory_stats() shows it (JAX's key names). */
typedef struct {
  long long bytes_in_use;       /* live allocations (rounded as allocated) */
  long long peak_bytes_in_use;  /* the most at once since the process began */
  long long bytes_limit;        /* the device's memory (the CPU: physical memory) */
  long long num_allocs;         /* allocations made since the process began */
  long long largest_alloc_size;
  long long pool_bytes;         /* freed memory kept for reuse, not in use */
} kl_mem_stats;

/* The counters behind it, kept by each device's alloc and free (device.c). */
typedef struct {
  _Atomic long long in_use, peak, nallocs, largest;
} kl_mem_count;
void kl_mem_count_alloc(kl_mem_count *c, size_t n);
void kl_mem_count_free(kl_mem_count *c, size_t n);
void kl_mem_count_reset_peak(kl_mem_count *c);
/* Fills the counted fields of s. */
void kl_mem_count_read(kl_mem_count *c, kl_mem_stats *s);

/* What a device says about itself (fields a device lacks are 0). */
typedef struct {
  char name[128];
  int cc_major, cc_minor; /* CUDA compute capability */
  int num_sms;            /* CUDA streaming multiprocessors */
  int driver_version;     /* CUDA driver, as cuDriverGetVersion says */
  size_t total_mem;       /* bytes */
} kl_device_info;

/* One device kind's functions. Every entry is set; all are thread-safe. Memory pointers are the
 * device's own (host pointers for the CPU, device addresses for CUDA); a function that takes
 * err/errlen leaves a message there when it fails. */
typedef struct kl_device {
  const char *name; /* "cpu", "cuda" */
  int kind;         /* its kl_device_kind */
  /* 1: new buffers are READY at once (their work is ordered by the device's queue and b->event
   * says when the data is there); 0: PENDING until the launch that writes them marks them. */
  int born_ready;

  /* 1 if the device is usable; else 0 with the reason in why (why may be NULL). The first call
   * may set the device up (open its driver). */
  int (*available)(char *why, size_t n);
  /* Fills *info (all zero when the device is not available). */
  void (*info)(kl_device_info *info);

  /* nbytes of device memory into *ptr: 0, or -1 (out of memory, no device). */
  int (*alloc)(size_t nbytes, void **ptr, char *err, size_t errlen);
  /* Frees what alloc returned (nbytes as asked for then) once no queued work uses it: CUDA frees
   * in stream order; the CPU's launches hold references to their buffers, so it frees at once. */
  void (*free)(void *ptr, size_t nbytes);
  /* What the device's memory holds now (kiln's allocations, counted as alloc/free see them). */
  void (*memory_stats)(kl_mem_stats *s);
  /* Gives freed memory that kiln or the driver keeps for reuse back to the system (the CPU's
   * cache of large blocks; CUDA's cached small blocks, its pool, its graphs' memory). */
  void (*empty_cache)(void);
  /* Starts the peak over from what is in use now (kiln's own count; CUDA graphs' high mark too). */
  void (*reset_peak)(void);

  /* Copies n bytes of host memory src to device memory dst that no queued work touches (a new
   * buffer's); returns once src may be reused, not necessarily once the copy is done. 0 or -1. */
  int (*upload)(void *dst, const void *src, size_t n, char *err, size_t errlen);
  /* Copies b's nbytes to host memory dst once the work writing b is done, without waiting for
   * work queued after it; returns when the bytes are there. 0 or -1 (b failed, copy failed). */
  int (*read)(void *dst, kl_buffer *b, char *err, size_t errlen);

  /* 1 if b is ready or failed; never blocks. */
  int (*is_ready)(const kl_buffer *b);
  /* Blocks until b is ready or failed; returns its kl_buf_state. */
  int (*wait)(kl_buffer *b);
  /* The same for at most `seconds`: KL_BUF_PENDING when the time ran out. NULL: the device
   * cannot bound a wait (kl_buf_wait_for then blocks). */
  int (*wait_for)(kl_buffer *b, double seconds);
  /* Ctrl-C (kl_rt_stop_request, kl_rt_stop_clear): a device whose loops run without the host
   * passes the request on to them; at the clear, the outputs a loop ended early for it left
   * partial fail with "interrupted". NULL: the host's stop flag reaches all its loops. */
  void (*stop)(int requested);
  /* Drops one reference to an event (a buffer's b->event), when the buffer goes. */
  void (*event_release)(struct kl_event *e);
  /* Frees an executable's dev_state (NULL: the device keeps none). */
  void (*exec_state_free)(void *state);
  /* The device's queue as a handle other libraries understand (CUDA: the CUstream), or NULL. */
  void *(*stream)(void);
  /* Makes another library's queue `stream` on this device wait for the work writing b, without
   * blocking the host where the device can (the CPU has no queues to order: it waits). 0 or -1. */
  int (*stream_wait)(void *stream, kl_buffer *b);

  /* kl_exec_launch for executables of this device (see runtime.h); preset (or NULL): per output,
   * a buffer to write it into (a donated input's, see kl_exec_launch_into) or NULL. */
  int (*launch)(kl_exec *x, kl_buffer **inputs, kl_buffer *const *preset, kl_buffer **outs, char *err, size_t errlen);
  /* kl_exec_launch_group for executables of this device (outputs' ordinals set by the caller), or
   * NULL where the device cannot run groups yet. */
  int (*launch_group)(kl_exec *x, int n, const int *ordinals, const kl_span *span, kl_buffer **inputs,
                      kl_buffer **outs, char *err, size_t errlen);
  /* Devices of a kind that has several real ones (CUDA), else NULL. use_ordinal makes `ordinal`
   * the calling thread's device of the kind for the allocations, frees, uploads and launches that
   * follow (ordinal < 0: unchanged) and returns the one before; copy copies src's bytes into dst,
   * a buffer of the same size on the same kind's device dst->ordinal, returning once they are
   * there (0, or -1 with a message); count is how many devices of the kind there are. */
  int (*use_ordinal)(int ordinal);
  int (*copy)(kl_buffer *dst, kl_buffer *src, char *err, size_t errlen);
  int (*count)(void);
  /* Waits until every launch queued on the device is finished. 0 or -1. Never call it from
   * inside a launch (the CPU's executor would wait for itself). */
  int (*synchronize)(void);

  /* The library the device's matrix products go to (the CPU's BLAS, cuBLAS), opened at run time.
   * library_add_path offers a candidate path, tried after the standard names: 0 if recorded,
   * -1 if not (too many, or the search already ran). */
  int (*library_add_path)(const char *path);
  /* 1 and the library's path (or what stands in for it) in out, or 0 and why there is none. May
   * open the library. */
  int (*library)(char *out, size_t n);
} kl_device;

/* The table of device kind `kind` (borrowed, static), or NULL for a kind this build lacks. */
const kl_device *kl_device_get(int kind);

/* The implementations, registered in runtime/device.c; everyone else goes through kl_device_get. */
extern const kl_device kl_device_cpu;  /* runtime/cpu.c */
extern const kl_device kl_device_cuda; /* runtime/cuda.c */
#endif
