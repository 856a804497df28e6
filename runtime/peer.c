/* peer.c: the all-reduce (sum) between two GPUs of this process on their copy engines, for the
 * big gradient sums of data-parallel training. NCCL's all-reduce is a kernel holding some two
 * dozen multiprocessors for its whole length; beside a cuBLAS product it ran 2.5 times slower than
 * alone, and the product lost a wave to the multiprocessors left to it. Here each GPU pulls the
 * other's half of the operand over NVLink with its copy engine, adds its own half to it (one
 * short kernel), and pulls the other's summed half back: no multiprocessor waits on the link.
 * Every GPU sums the same pairs (a + b on one, b + a on the other: the same bits), so the results
 * agree, as NCCL's do.
 *
 * Up to KILN_PEER_PUSH_MIB MiB (default 16) the sum kernel also stores its half into the other
 * GPU's result, so no second copy is needed: one meeting fewer at the end of a step, where such a
 * sum waits on nothing else. Bigger sums, which run beside the products of the backward pass, leave
 * the link to the copy engines, not to a kernel holding multiprocessors while it writes.
 *
 * The two GPUs' streams order the steps between them through one word of pinned host memory each:
 * a GPU's stream sets its word to 3s+1 once its operand is ready, 3s+2 once its sum is written
 * (and, with a second copy, 3s+3 once it has read the other's half), and waits for the other's
 * word to reach the same before the step that needs it (s: the pair's count of all-reduces, which
 * both participants keep in step because they run the same program). The host threads exchange
 * only the buffers' addresses (runtime/collective.h) and never wait for a GPU. Knows nothing of
 * the IR. */
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/status.h"
#include "collective.h"
#include "cuda.h"
#include "peer.h"

/* Two GPUs in member order: their flag words (host memory) and each member's count of all-reduces. */
typedef struct pair {
  int ords[2];
  uint32_t *flags;
  uint32_t seq[2]; /* each touched only by its member's thread */
  int reach;       /* the two GPUs reach each other's memory */
  int broken;      /* a member failed between its flag steps: the words are out of step, NCCL from now on */
  struct pair *next;
} pair;
static pair *pairs;
static pthread_mutex_t pairs_mu = PTHREAD_MUTEX_INITIALIZER;

static pair *pair_for(const int *ords) {
  pthread_mutex_lock(&pairs_mu);
  pair *p = pairs;
  while (p && (p->ords[0] != ords[0] || p->ords[1] != ords[1])) p = p->next;
  if (!p && (p = calloc(1, sizeof *p))) {
    if (!(p->flags = kl_cuda_host_words(2))) {
      free(p);
      p = NULL;
    } else {
      p->ords[0] = ords[0], p->ords[1] = ords[1];
      p->reach = kl_cuda_can_reach(ords[0], ords[1]);
      p->next = pairs;
      pairs = p;
    }
  }
  pthread_mutex_unlock(&pairs_mu);
  return p;
}

/* The sums' kernels: dst[i] = a[i] + b[i] for i < n, also stored at dst2 unless it is 0 (params
 * dst, a, b, n, dst2), vectors of 16 bytes in a grid-stride loop (every pointer 16-byte aligned),
 * then the last n % V one element a thread; or one element at a time (any alignment). */
typedef struct {
  const char *name, *t; /* PTX type */
  int v, log_v, log_es; /* elements a vector, log2 of that, log2 of an element's bytes */
} kernel;
static const kernel kernels[4] = {{"kl_peer_add_f32_v4", "f32", 4, 2, 2}, {"kl_peer_add_f32", "f32", 1, 0, 2},
                                  {"kl_peer_add_f64_v2", "f64", 2, 1, 3}, {"kl_peer_add_f64", "f64", 1, 0, 3}};

static char ptx[8192];

/* Appends to ptx. */
static void put(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void put(const char *fmt, ...) {
  size_t n = strlen(ptx);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(ptx + n, sizeof ptx - n, fmt, ap);
  va_end(ap);
}

/* "{%x0, %x1, ...}" for v registers named r (or "%x0" for one). */
static const char *regs(char *buf, const char *r, int v) {
  if (v == 1) {
    snprintf(buf, 64, "%%%s0", r);
    return buf;
  }
  strcpy(buf, "{");
  for (int k = 0; k < v; k++) snprintf(buf + strlen(buf), 64 - strlen(buf), "%s%%%s%d", k ? ", " : "", r, k);
  strcat(buf, "}");
  return buf;
}

static void put_kernel(const kernel *k) {
  char x[64], y[64];
  const char *vec = k->v == 4 ? ".v4" : k->v == 2 ? ".v2" : "";
  put(".visible .entry %s(.param .u64 dst, .param .u64 a, .param .u64 b, .param .u64 n, .param .u64 dst2)\n{\n", k->name);
  put("  .reg .pred %%p, %%q;\n  .reg .b32 %%r<5>;\n  .reg .b64 %%d<16>;\n  .reg .%s %%x<4>, %%y<4>;\n", k->t);
  put("  ld.param.u64 %%d1, [dst];\n  ld.param.u64 %%d2, [a];\n  ld.param.u64 %%d3, [b];\n  ld.param.u64 %%d4, [n];\n"
      "  ld.param.u64 %%d12, [dst2];\n  setp.ne.u64 %%q, %%d12, 0;\n");
  put("  mov.u32 %%r1, %%ctaid.x;\n  mov.u32 %%r2, %%ntid.x;\n  mov.u32 %%r3, %%tid.x;\n  mov.u32 %%r4, %%nctaid.x;\n"
      "  mul.wide.u32 %%d5, %%r1, %%r2;\n  cvt.u64.u32 %%d6, %%r3;\n  add.u64 %%d5, %%d5, %%d6;\n"
      "  mov.u64 %%d13, %%d5;\n  mul.wide.u32 %%d7, %%r4, %%r2;\n  shr.u64 %%d6, %%d4, %d;\n", k->log_v);
  /* vectors [0, n / v) */
  put("VLOOP:\n  setp.ge.u64 %%p, %%d5, %%d6;\n  @%%p bra TAIL;\n  shl.b64 %%d8, %%d5, %d;\n", k->log_v + k->log_es);
  put("  add.u64 %%d9, %%d2, %%d8;\n  ld.global%s.%s %s, [%%d9];\n", vec, k->t, regs(x, "x", k->v));
  put("  add.u64 %%d10, %%d3, %%d8;\n  ld.global%s.%s %s, [%%d10];\n", vec, k->t, regs(y, "y", k->v));
  for (int e = 0; e < k->v; e++) put("  add.%s %%x%d, %%x%d, %%y%d;\n", k->t, e, e, e);
  put("  add.u64 %%d11, %%d1, %%d8;\n  st.global%s.%s [%%d11], %s;\n", vec, k->t, x);
  put("  @%%q add.u64 %%d14, %%d12, %%d8;\n  @%%q st.global%s.%s [%%d14], %s;\n", vec, k->t, x);
  put("  add.u64 %%d5, %%d5, %%d7;\n  bra VLOOP;\n");
  /* the last n % v elements, one a thread */
  put("TAIL:\n  shl.b64 %%d15, %%d6, %d;\n  add.u64 %%d15, %%d15, %%d13;\n  setp.ge.u64 %%p, %%d15, %%d4;\n"
      "  @%%p bra DONE;\n  shl.b64 %%d8, %%d15, %d;\n", k->log_v, k->log_es);
  put("  add.u64 %%d9, %%d2, %%d8;\n  ld.global.%s %%x0, [%%d9];\n  add.u64 %%d10, %%d3, %%d8;\n"
      "  ld.global.%s %%y0, [%%d10];\n  add.%s %%x0, %%x0, %%y0;\n", k->t, k->t, k->t);
  put("  add.u64 %%d11, %%d1, %%d8;\n  st.global.%s [%%d11], %%x0;\n  @%%q add.u64 %%d14, %%d12, %%d8;\n"
      "  @%%q st.global.%s [%%d14], %%x0;\nDONE:\n  ret;\n}\n\n", k->t, k->t);
}

static pthread_once_t ptx_once = PTHREAD_ONCE_INIT;
static void write_ptx(void) {
  put("// kiln's peer all-reduce (runtime/peer.c)\n.version 7.0\n.target sm_70\n.address_size 64\n\n");
  for (int i = 0; i < 4; i++) put_kernel(&kernels[i]);
}

const char *kl_peer_ptx(void) {
  pthread_once(&ptx_once, write_ptx);
  return ptx;
}

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static void *module, *add_fn[4];
static char load_err[400];
static _Atomic int loaded_on[KL_CUDA_MAX_GPUS]; /* the kernels are loaded on that GPU */

static void load(void) {
  void *image = NULL;
  size_t len = 0;
  const char *text = kl_peer_ptx();
  if (kl_cuda_link_ptx(text, strlen(text) + 1, &image, &len, load_err, sizeof load_err) ||
      kl_cuda_module_load(image, len, &module, load_err, sizeof load_err))
    module = NULL;
  free(image);
}

/* The kernels, loaded on the thread's GPU now: before any stream waits for the other GPU (a module
 * loaded later, while the other GPU's stream waits on this one, could wait for it). 0, or -1. */
static int load_here(char *err, size_t errlen) {
  int gpu = kl_cuda_ordinal();
  if (loaded_on[gpu]) return 0;
  pthread_once(&load_once, load);
  if (!module) return kl_error(err, errlen, KL_ERR_INTERNAL, "the peer all-reduce's kernels: %s", load_err);
  for (int i = 0; i < 4; i++)
    if (kl_cuda_function(module, kernels[i].name, &add_fn[i], err, errlen)) return -1;
  loaded_on[gpu] = 1;
  return 0;
}

/* Queues dst[0..n) = a + b (and the same at dst2 unless NULL), n elements of 4 or 8 bytes (dbl). */
static int sum(int dbl, void *dst, const void *a, const void *b, void *dst2, size_t n, char *err, size_t errlen) {
  if (!n) return 0;
  int aligned = !(((uintptr_t)dst | (uintptr_t)a | (uintptr_t)b | (uintptr_t)dst2) & 15);
  int k = 2 * dbl + !aligned;
  size_t threads = aligned ? n / (size_t)kernels[k].v : n;
  if (threads < 64) threads = 64; /* (the tail's elements, one a thread) */
  unsigned grid = (unsigned)((threads + 255) / 256 < 2048 ? (threads + 255) / 256 : 2048);
  void *args[5] = {dst, (void *)a, (void *)b, (void *)(uintptr_t)n, dst2};
  return kl_cuda_launch(add_fn[k], grid, 256, args, 5, err, errlen);
}

static size_t min_bytes(void) {
  static long m = -1;
  if (m < 0) m = (long)kl_cuda_env_count("KILN_PEER_ALLREDUCE_MIB", 4);
  return (size_t)m << 20;
}

int kl_peer_all_reduce_ok(const int *ords, int g, kl_dtype dt, size_t bytes) {
  if (g != 2 || (dt != KL_F32 && dt != KL_F64) || !min_bytes() || bytes < min_bytes()) return 0;
  if (kl_cuda_queue_capturing()) return 0; /* a graph would replay one sum's flag values and addresses: NCCL there */
  pair *p = pair_for(ords);
  return p && p->reach && !p->broken;
}

/* Queues its stage's flag, waits for the other's: 0, or -1 with a message. */
static int meet(pair *p, int pos, uint32_t v, char *err, size_t errlen) {
  return kl_cuda_flag_set(&p->flags[pos], v, err, errlen) || kl_cuda_flag_wait(&p->flags[1 - pos], v, err, errlen) ? -1
                                                                                                                   : 0;
}

int kl_peer_all_reduce(kl_coll_group *grp, int rank, int other_rank, const int *ords, int pos, const void *src,
                       void *dst, size_t count, kl_dtype dt, char *err, size_t errlen) {
  int dbl = dt == KL_F64;
  pair *p = pair_for(ords);
  if (!p) kl_error(err, errlen, KL_ERR_NOMEM, "out of host memory for a peer all-reduce");
  if (!p || load_here(err, errlen)) {
    kl_coll_abort(grp, err); /* the other must not wait for this one at the exchange */
    return -1;
  }
  struct { const void *src; void *dst; } mine = {src, dst}, theirs;
  const void *const *posts = kl_coll_exchange(grp, rank, &mine, sizeof mine, "psum", err, errlen);
  if (!posts) return -1;
  memcpy(&theirs, posts[other_rank], sizeof theirs);
  size_t es = dbl ? 8 : 4, half = count / 2 / 64 * 64; /* the second half 256-byte aligned like the first */
  size_t off = pos ? half : 0, len = pos ? count - half : half;    /* this member's half */
  size_t off_o = pos ? 0 : half, len_o = pos ? half : count - half; /* the other's */
  /* up to KILN_PEER_PUSH_MIB (default 16), the sum kernel also stores this half into the other's result: one meeting
   * and one copy fewer, for a kernel that holds multiprocessors while it writes over the link */
  static long push_mib = -1;
  if (push_mib < 0) push_mib = kl_cuda_env_count("KILN_PEER_PUSH_MIB", 16);
  int push = count * es <= ((size_t)push_mib << 20);
  uint32_t s = 3u * ++p->seq[pos];
  /* the other's half of its operand lands in this one's half of the result (in a temporary when they are one) */
  void *tmp = NULL, *in = (char *)dst + off * es;
  int rc = (src == dst && kl_cuda_alloc(len * es, &tmp, err, errlen)) || meet(p, pos, s + 1, err, errlen) ||
           kl_cuda_copy_from(tmp ? tmp : in, (const char *)theirs.src + off * es, ords[1 - pos], len * es, err, errlen) ||
           sum(dbl, in, (const char *)src + off * es, tmp ? tmp : in, push ? (char *)theirs.dst + off * es : NULL, len, err,
               errlen);
  if (tmp) kl_cuda_free(tmp, len * es);
  if (push) rc = rc || meet(p, pos, s + 2, err, errlen);
  else
    rc = rc || meet(p, pos, s + 2, err, errlen) ||
         kl_cuda_copy_from((char *)dst + off_o * es, (const char *)theirs.dst + off_o * es, ords[1 - pos], len_o * es,
                           err, errlen) ||
         meet(p, pos, s + 3, err, errlen);
  if (rc) { /* the other GPU must not wait for this one's words forever, nor its thread at the meeting below */
    __atomic_store_n(&p->flags[pos], s + 3, __ATOMIC_SEQ_CST);
    p->broken = 1;
    kl_coll_abort(grp, err);
  }
  /* nobody goes on (to free its buffers at its launch's end) before both have queued every use of the other's:
   * the driver checks a copy's pointers as it is queued, and took a freed one for host memory */
  char late[200];
  if (kl_coll_rendezvous(grp, rc ? late : err, rc ? sizeof late : errlen)) rc = -1;
  kl_cuda_comm_on_copy_engines();
  return rc ? -1 : 0;
}
