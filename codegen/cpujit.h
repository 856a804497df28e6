/* cpujit.h: host machine code for lowered MLIR modules through LLVM's ORC LLJIT, with a
 * process-wide table of loaded code and an on-disk object cache (KILN_CACHE_DIR, default
 * ~/.cache/kiln; "off" disables it). Code, once loaded, stays for the life of the process.
 * Depends on the MLIR and LLVM C APIs only. */
#ifndef KL_CPUJIT_H
#define KL_CPUJIT_H
#include <mlir-c/IR.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*kl_kernel_fn)(void **args, int64_t lo, int64_t hi);

/* A cache key for module text `text` on this host (includes CPU, features, versions). */
uint64_t kl_cpujit_key(const char *text);

/* Finds the code for `key` in memory or in the disk cache; fills fns[0..n) with the functions
 * `<prefix><i>`. Returns 1 on a hit, 0 on a miss. */
int kl_cpujit_find(uint64_t key, const char *prefix, int n, kl_kernel_fn *fns);

/* Compiles `module` (already lowered to the LLVM dialect) to an object, stores it under `key`
 * (memory and disk), loads it and fills fns. Returns 0, or -1 with a message. Caller holds the
 * MLIR lock. */
int kl_cpujit_compile(MlirModule module, uint64_t key, const char *prefix, int n, kl_kernel_fn *fns,
                      const char *passes /* LLVM pass pipeline, e.g. "default<O3>" */, char *err, size_t errlen);

/* The disk cache itself (atomic writes, checksummed reads), for other compiled artifacts:
 * read returns malloc'd bytes or NULL. */
void kl_diskcache_write(uint64_t key, const void *data, size_t len);
void *kl_diskcache_read(uint64_t key, size_t *len);

/* Counters for tests: objects compiled, loaded from disk, found in memory. */
void kl_cpujit_stats(long *compiled, long *disk_hits, long *memory_hits);
#endif
