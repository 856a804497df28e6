/* gpusort.c: the sort primitive on the GPU (see gpusort.h): a stable LSD radix sort over the
 * order-preserving codes of the keys, one 32-bit word at a time, least significant first (the
 * last key's low word first), the row-local positions riding along as the permutation; outputs
 * gathered through it at the end. Kernels: gpusort_ptx.c's, linked once by the driver. Knows
 * nothing of the IR; reaches the GPU only through runtime/cuda.h.
 *
 * Two shapes of work:
 * - Rows of at most 4096 elements: one block a row (ks_small_<it>, 256 threads x it items) sorts
 *   a word in shared memory (8-bit digits, every pass inside the block) and writes the
 *   permutation, gathering operand 0 through it when the word is the last one: a one-key sort of
 *   such rows is one launch, however many rows.
 * - Longer rows: tiles of 4096 elements (rows split into T tiles, never sharing one), 8-bit
 *   digits. Onesweep (rows under 2^30): per key word one ks_digits counts every pass's digits of
 *   every row in one read, then per pass one ks_scatter whose tiles find their digits' global
 *   starts by decoupled look-back over the earlier tiles' published counts (gpusort_ptx.c's
 *   look_back). Otherwise (the call's scan_passes, or rows of 2^30 keys or more) per pass: ks_hist (each tile's digit counts, laid out [row][digit][tile]), the
 *   exclusive scan of those counts (ks_scan_up/mid/down: each entry becomes the absolute position
 *   of a tile's first key of a digit, rows included: the row is the most significant digit for
 *   free), ks_scatter (a stable rank inside the tile from warp ballots, an exchange through
 *   shared memory, coalesced writes), ping-ponging between two buffers. On contiguous rows the
 *   first pass reads the codes off the operand and, with one key of one word, the last writes
 *   operand 0's output decoded from them (no gather: an argsort's sorted keys come free), and a
 *   second operand of 4 bytes (sort_key_val's value, a shuffle's) rides along in place of the
 *   permutation, its output written by the last pass too. With the call's random_keys (a shuffle's
 *   uint32 keys), the passes sort by the high 24 bits and ks_runs orders each run of equal ones by
 *   the low byte: one pass's reads and writes, and a quarter of ks_digits' counting, saved. A
 *   one-operand sort of a key of at most 32 bits moves the codes alone (no permutation). Float
 *   rows that held -0 or NaNs other than the canonical one get them back from ks_fixup.
 * Scratch memory is the caller's (a slot of the executable: nothing is allocated here, so graph
 * capture is fine). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/status.h"
#include "cuda.h"
#include "gpusort.h"

#define NT 256             /* threads per block (gpusort_ptx.c) */
#define SMALL_MAX 4096     /* rows up to this long: one block a row (ks_small_<it>, 256 x it <= 4096) */
#define SCAN_CHUNK 4096    /* counts a scan block handles (NT * 16) */
#define GRID_STRIDE_MAX 16384
#define RUN_TILE 4096     /* elements a block of ks_runs (gpusort_ptx.c's RUN_TILE) */
#define DIGITS_GRID 1024   /* ks_digits' blocks at most, each counting every 1024th tile (an H100, 10^7
                              keys: 58 us, against 100 with 256 blocks and 65 with a block a tile) */

/* ---- the plan ---- */

/* One 32-bit word of a key's code (gpusort_ptx.c's encode): operand op, its high word or low,
 * the significant bits, and the dtype's facts the kernels take as parameters. */
typedef struct {
  int op, word, bits;
  uint64_t esz, cls, sign, mask, inf, canon;
} key_word;

enum { CLS_UINT, CLS_SINT, CLS_FLOAT, CLS_BOOL };

static int cls_of(kl_dtype t) {
  switch (kl_dtype_kind(t)) {
  case KL_KIND_BOOL: return CLS_BOOL;
  case KL_KIND_INT: return CLS_SINT;
  case KL_KIND_UINT: return CLS_UINT;
  case KL_KIND_FLOAT: return CLS_FLOAT;
  default: return -1;
  }
}

/* The words of c's keys, least significant first: the sorts to run one after another. */
static int key_words(const kl_gpusort_call *c, key_word *w) {
  int nw = 0;
  for (int k = c->num_keys - 1; k >= 0; k--) {
    kl_dtype t = (kl_dtype)c->dtype[k];
    key_word x;
    memset(&x, 0, sizeof x);
    x.op = k;
    x.esz = kl_dtype_size(t);
    x.cls = (uint64_t)cls_of(t);
    x.sign = (uint64_t)1 << (8 * x.esz - 1);
    x.mask = x.esz == 8 ? ~(uint64_t)0 : ((uint64_t)1 << (8 * x.esz)) - 1;
    switch (t) { /* +inf and the canonical NaN (NumPy's) */
    case KL_F16: x.inf = 0x7c00, x.canon = 0x7e00; break;
    case KL_BF16: x.inf = 0x7f80, x.canon = 0x7fc0; break;
    case KL_F32: x.inf = 0x7f800000, x.canon = 0x7fc00000; break;
    case KL_F64: x.inf = 0x7ff0000000000000ull, x.canon = 0x7ff8000000000000ull; break;
    default: x.inf = x.mask, x.canon = 0; break;
    }
    x.bits = t == KL_BOOL ? 1 : x.esz == 8 ? 32 : (int)(8 * x.esz);
    w[nw++] = x;
    if (x.esz == 8) {
      x.word = 1;
      w[nw++] = x;
    }
  }
  return nw;
}

typedef struct {
  int64_t rows, total, T, cmax;
  int small, it, tit, keys_only, fix, need_perm, nw, fuse, dec0, carry, lookback, runs;
  key_word w[2 * KL_GPUSORT_MAX_OPERANDS];
  size_t keys[2], perm[2], counts, partials, flags, bytes; /* offsets into the scratch */
  size_t gcounts, status, pass_bytes; /* onesweep: per pass a counter (256 bytes before gcounts), digit
                                         counts [row][pass][256], per pass [tile][256] status words */
} layout;

static size_t take(size_t *at, size_t bytes) {
  size_t o = *at;
  *at += (bytes + 255) & ~(size_t)255;
  return o;
}

static void plan(const kl_gpusort_call *c, layout *L) {
  memset(L, 0, sizeof *L);
  L->nw = key_words(c, L->w);
  L->rows = c->outer * c->inner;
  L->total = L->rows * c->n;
  L->small = c->n <= SMALL_MAX;
  for (L->it = 1; L->it < 16 && (int64_t)NT * L->it < c->n; L->it *= 2) {}
  L->tit = c->tile_items == 8 ? 8 : 16;
  L->fuse = c->inner == 1; /* the first pass reads the keys' codes off the operand, the last writes values */
  L->keys_only = !L->small && c->nin == 1 && L->nw == 1;
  /* one key of one word on contiguous rows: the last pass writes operand 0's output decoded from
   * the codes (no gather through the permutation: a random read of every element) */
  L->dec0 = !L->small && L->fuse && L->nw == 1;
  L->fix = (L->keys_only || L->dec0) && L->w[0].cls == CLS_FLOAT;
  /* with that, a second operand of 4 bytes rides along itself (or, an iota, as the positions) and
   * the last pass writes its output: no gather through the permutation */
  L->carry = L->dec0 && c->nin == 2 && c->num_keys == 1 && kl_dtype_size((kl_dtype)c->dtype[1]) == 4;
  size_t at = 0, t4 = (size_t)L->total * 4;
  if (L->small) {
    L->need_perm = c->nin > 1 || L->nw > 1;
    if (L->need_perm) L->perm[0] = take(&at, t4);
  } else {
    L->T = (c->n + NT * L->tit - 1) / (NT * L->tit);
    L->cmax = L->rows * 256 * L->T;
    L->keys[0] = take(&at, t4);
    L->keys[1] = take(&at, t4);
    if (!L->keys_only) {
      L->need_perm = 1;
      L->perm[0] = take(&at, t4);
      L->perm[1] = take(&at, t4);
    }
    /* a status word holds a count below 2^30 (two flag bits above) */
    L->lookback = !c->scan_passes && c->n < ((int64_t)1 << 30);
    if (L->lookback) { /* the counters then gcounts, contiguous: one zeroing a word (ks_digits zeroes status) */
      L->pass_bytes = (size_t)L->rows * (size_t)L->T * 1024;
      L->gcounts = take(&at, 256 + (size_t)L->rows * 4096) + 256;
      L->status = take(&at, 4 * L->pass_bytes);
    } else {
      L->counts = take(&at, (size_t)L->cmax * 4);
      L->partials = take(&at, (size_t)((L->cmax + SCAN_CHUNK - 1) / SCAN_CHUNK) * 4);
    }
    if (L->fix) L->flags = take(&at, (size_t)L->rows * 4);
    /* random unsigned 32-bit keys carrying a value: passes over the high 24 bits, ks_runs the rest */
    L->runs = c->random_keys && L->carry && L->lookback && L->w[0].cls == CLS_UINT && L->w[0].esz == 4;
  }
  L->bytes = at ? at : 256;
}

int kl_gpusort_check(const kl_gpusort_call *c) {
  if (c->nin < 1 || c->nin > KL_GPUSORT_MAX_OPERANDS || c->num_keys < 1 || c->num_keys > c->nin) return -1;
  if (c->outer < 0 || c->n < 0 || c->inner < 0 || (c->tile_items && c->tile_items != 8 && c->tile_items != 16)) return -1;
  for (int k = 0; k < c->nin; k++)
    if (c->dtype[k] < 0 || c->dtype[k] >= KL_NDTYPES || cls_of((kl_dtype)c->dtype[k]) < 0) return -1;
  int64_t lim = (int64_t)1 << 31;
  if (c->n >= lim || c->outer >= lim || c->inner >= lim) return -1;
  if (c->outer && c->inner && c->outer * c->inner >= lim / (c->n ? c->n : 1)) return -1;
  return 0;
}

size_t kl_gpusort_scratch_bytes(const kl_gpusort_call *c) {
  layout L;
  plan(c, &L);
  return L.bytes;
}

/* ---- the launches ---- */

typedef struct {
  kl_gpusort_launcher launch;
  void *ctx;
  int failed;
} queue;

#define ARG(p) ((uint64_t)(uintptr_t)(p))

static void run(queue *q, const char *kernel, int64_t grid, const uint64_t *args, int nargs) {
  if (!q->failed && grid > 0 && q->launch(q->ctx, kernel, (unsigned)grid, NT, args, nargs)) q->failed = 1;
}

static int64_t stride_grid(int64_t total) {
  int64_t g = (total + NT - 1) / NT;
  return g < GRID_STRIDE_MAX ? g : GRID_STRIDE_MAX;
}

/* Every output of operand k > first from the permutation perm: its iota, or a gather. */
static void outputs(queue *q, const kl_gpusort_call *c, const layout *L, void *const *in, void *const *out, char *perm,
                    int first) {
  for (int k = first; k < c->nin; k++) {
    uint64_t esz = kl_dtype_size((kl_dtype)c->dtype[k]);
    if (c->iota[k]) {
      uint64_t a[] = {ARG(perm), ARG(out[k]), (uint64_t)c->n, (uint64_t)c->inner, (uint64_t)L->total, esz};
      run(q, "ks_iota", stride_grid(L->total), a, 6);
    } else {
      uint64_t a[] = {ARG(in[k]), ARG(out[k]), ARG(perm), (uint64_t)c->n, (uint64_t)c->inner, (uint64_t)L->total, esz};
      run(q, "ks_gather", stride_grid(L->total), a, 7);
    }
  }
}

static void run_small(queue *q, const kl_gpusort_call *c, const layout *L, void *const *in, void *const *out,
                      char *sc) {
  char name[32];
  snprintf(name, sizeof name, "ks_small_%d", L->it);
  char *perm = L->need_perm ? sc + L->perm[0] : NULL;
  for (int i = 0; i < L->nw; i++) {
    const key_word *w = &L->w[i];
    int last = i == L->nw - 1;
    uint64_t a[] = {ARG(in[w->op]), i ? ARG(perm) : 0, last && c->nin == 1 ? 0 : ARG(perm), (uint64_t)c->n,
                    (uint64_t)c->inner, w->esz, w->cls, w->sign, w->mask, w->inf, (uint64_t)w->word, (uint64_t)w->bits,
                    last ? ARG(in[0]) : 0, last ? ARG(out[0]) : 0, kl_dtype_size((kl_dtype)c->dtype[0])};
    run(q, name, L->rows, a, 15);
  }
  outputs(q, c, L, in, out, perm, 1);
}

static void run_tiles(queue *q, const kl_gpusort_call *c, const layout *L, void *const *in, void *const *out,
                      char *sc) {
  uint64_t n = (uint64_t)c->n, inner = (uint64_t)c->inner, total = (uint64_t)L->total, T = (uint64_t)L->T;
  char *keys[2] = {sc + L->keys[0], sc + L->keys[1]};
  char *perm[2] = {L->need_perm ? sc + L->perm[0] : NULL, L->need_perm ? sc + L->perm[1] : NULL};
  char *counts = sc + L->counts, *partials = sc + L->partials, *flags = L->fix ? sc + L->flags : NULL;
  if (flags) {
    uint64_t a[] = {ARG(flags), (uint64_t)L->rows};
    run(q, "ks_zero", stride_grid(L->rows), a, 2);
  }
  char hist[32], scat[32], digits[32];
  snprintf(hist, sizeof hist, "ks_hist_%d", L->tit);
  snprintf(digits, sizeof digits, "ks_digits_%d", L->tit);
  snprintf(scat, sizeof scat, "ks_scatter_%s_%d", L->keys_only ? "k" : "kv", L->tit);
  int side = 0, low = L->runs ? 8 : 0; /* the lowest bit the passes sort by */
  for (int i = 0; i < L->nw; i++) {
    const key_word *w = &L->w[i];
    int fused = L->fuse && i == 0; /* codes read off the operand by the first pass */
    if (!fused) {
      uint64_t a[] = {ARG(in[w->op]), ARG(keys[side]), ARG(perm[side]), n, inner, total, w->esz, w->cls, w->sign,
                      w->mask, w->inf, (uint64_t)w->word, i == 0, ARG(flags), w->canon};
      run(q, "ks_encode", stride_grid(L->total), a, 15);
    }
    char *gcounts = L->lookback ? sc + L->gcounts : NULL;
    if (gcounts) { /* every pass's digit counts from one read of the word, the status words zeroed */
      uint64_t words = 64 + (uint64_t)L->rows * 1024;
      uint64_t z[] = {ARG(gcounts - 256), words};
      run(q, "ks_zero", stride_grid((int64_t)words), z, 2);
      uint64_t d[] = {ARG(keys[side]), ARG(gcounts), n, T, (uint64_t)w->bits, ARG(in[w->op]), w->esz, w->cls, w->sign,
                      w->mask, w->inf, (uint64_t)w->word, w->canon, ARG(fused ? flags : NULL), (uint64_t)fused,
                      (uint64_t)(L->rows * L->T), ARG(sc + L->status), (uint64_t)low / 8};
      run(q, digits, L->rows * L->T < DIGITS_GRID ? L->rows * L->T : DIGITS_GRID, d, 18);
    }
    for (int shift = low; shift < w->bits; shift += 8) {
      uint64_t pb = (uint64_t)(w->bits - shift < 8 ? w->bits - shift : 8);
      uint64_t C = (uint64_t)L->rows * ((uint64_t)1 << pb) * T, P = (C + SCAN_CHUNK - 1) / SCAN_CHUNK;
      int enc = fused && shift == low, dec = L->dec0 && !L->runs && shift + 8 >= w->bits;
      uint64_t mode = (uint64_t)(enc | dec << 1);
      char *status = gcounts ? sc + L->status + (size_t)(shift / 8) * L->pass_bytes : NULL;
      if (!gcounts) {
        uint64_t h[] = {ARG(keys[side]), ARG(counts), n, T, (uint64_t)shift, pb, ARG(in[w->op]), w->esz, w->cls,
                        w->sign, w->mask, w->inf, (uint64_t)w->word, w->canon, ARG(enc ? flags : NULL), mode & 1};
        run(q, hist, L->rows * L->T, h, 16);
        uint64_t up[] = {ARG(counts), ARG(partials), C}, mid[] = {ARG(partials), P};
        run(q, "ks_scan_up", (int64_t)P, up, 3);
        run(q, "ks_scan_mid", 1, mid, 2);
        run(q, "ks_scan_down", (int64_t)P, up, 3);
      }
      int val = L->carry && enc && !c->iota[1]; /* the first pass reads operand 1's values */
      uint64_t sc[] = {ARG(keys[side]), ARG(val ? in[1] : perm[side]), ARG(dec ? out[0] : keys[!side]),
                       ARG(L->carry && dec ? out[1] : perm[!side]), ARG(counts), n, T, (uint64_t)shift, pb,
                       ARG(in[w->op]), w->esz, w->cls, w->sign, w->mask, w->inf, (uint64_t)w->word, w->canon,
                       mode | (uint64_t)val << 2, ARG(status), ARG(gcounts)};
      run(q, scat, L->rows * L->T, sc, 20);
      side = !side;
    }
  }
  if (L->runs) { /* the low byte inside runs of equal high bits; keys[!side] is free */
    uint64_t r[] = {ARG(keys[side]), ARG(perm[side]), c->keys_unused ? 0 : ARG(out[0]), ARG(out[1]), n, total,
                    ARG(keys[!side])};
    run(q, "ks_runs", (L->total + RUN_TILE - 1) / RUN_TILE, r, 7);
  }
  const key_word *w = &L->w[0];
  if (L->keys_only && !L->dec0) {
    uint64_t d[] = {ARG(keys[side]), ARG(out[0]), n, inner, total, w->esz, w->cls, w->sign, w->mask, w->inf,
                    (uint64_t)w->word, w->canon};
    run(q, "ks_decode", stride_grid(L->total), d, 12);
  }
  if (flags) { /* the decoded output's -0s and NaNs, as the operand holds them */
    uint64_t f[] = {ARG(in[0]), ARG(out[0]), ARG(flags), n, inner, w->esz, w->cls, w->sign, w->mask, w->inf,
                    (uint64_t)w->word, w->canon};
    run(q, "ks_fixup", L->rows, f, 12);
  }
  if (!L->keys_only && !L->carry) outputs(q, c, L, in, out, perm[side], L->dec0);
}

int kl_gpusort_run_with(const kl_gpusort_call *c, void *const *in, void *const *out, void *scratch,
                        kl_gpusort_launcher launch, void *ctx, char *err, size_t errlen) {
  if (kl_gpusort_check(c)) return kl_error(err, errlen, KL_ERR_INTERNAL, "internal error: the GPU sort cannot run this call");
  layout L;
  plan(c, &L);
  queue q = {launch, ctx, 0};
  if (L.total == 0) return 0;
  if (L.small) run_small(&q, c, &L, in, out, scratch);
  else run_tiles(&q, c, &L, in, out, scratch);
  if (q.failed && err && !err[0]) kl_error(err, errlen, KL_ERR_INTERNAL, "a GPU sort kernel did not launch");
  return q.failed ? -1 : 0;
}

static int count_launch(void *ctx, const char *kernel, unsigned grid, unsigned block, const uint64_t *args, int nargs) {
  (void)kernel, (void)grid, (void)block, (void)args, (void)nargs;
  ++*(int *)ctx;
  return 0;
}

int kl_gpusort_launches(const kl_gpusort_call *c) {
  int n = 0;
  void *none[KL_GPUSORT_MAX_OPERANDS] = {0};
  char err[8] = "";
  if (kl_gpusort_check(c)) return 0;
  kl_gpusort_run_with(c, none, none, NULL, count_launch, &n, err, sizeof err);
  return n;
}

const char *kl_gpusort_describe(const kl_gpusort_call *c, char *buf, size_t n) {
  layout L;
  plan(c, &L);
  int passes = 0;
  for (int i = 0; i < L.nw; i++) passes += (L.w[i].bits + 7) / 8;
  if (L.runs) passes--;
  snprintf(buf, n, "radix sort, %d key word%s (%d passes), %lld row%s of %lld, %s%s%s", L.nw, L.nw == 1 ? "" : "s", passes,
           (long long)L.rows, L.rows == 1 ? "" : "s", (long long)c->n,
           L.small ? "one block a row" : L.lookback ? "tiled onesweep passes" : "tiled passes",
           L.keys_only ? ", codes only" : L.carry ? ", keys decoded, values carried" : L.dec0 ? ", keys decoded" : "",
           L.runs ? ", the low byte inside runs (random keys)" : "");
  return buf;
}

/* ---- the module ---- */

static const char *const kernel_names[] = {
    "ks_encode",  "ks_hist_8",  "ks_hist_16", "ks_digits_8", "ks_digits_16", "ks_scatter_k_8", "ks_scatter_k_16", "ks_scatter_kv_8", "ks_scatter_kv_16",
    "ks_scan_up", "ks_scan_mid", "ks_scan_down", "ks_small_1", "ks_small_2", "ks_small_4", "ks_small_8", "ks_small_16",
    "ks_gather",  "ks_iota",    "ks_decode",  "ks_fixup",       "ks_runs",        "ks_zero"};
#define NKERNELS (int)(sizeof kernel_names / sizeof *kernel_names)
static void *functions[NKERNELS];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static int tried, ready;
static char why[320];

static void load_module(void) {
  tried = 1;
  const char *ptx = kl_gpusort_ptx();
  if (!ptx) {
    snprintf(why, sizeof why, "out of memory writing the sort kernels' PTX");
    return;
  }
  void *image = NULL, *mod = NULL;
  size_t len = 0;
  char err[256] = "";
  int rc = kl_cuda_link_ptx(ptx, strlen(ptx) + 1, &image, &len, err, sizeof err) ||
           kl_cuda_module_load(image, len, &mod, err, sizeof err);
  for (int i = 0; !rc && i < NKERNELS; i++) rc = kl_cuda_function(mod, kernel_names[i], &functions[i], err, sizeof err);
  free(image);
  if (rc) snprintf(why, sizeof why, "the sort kernels did not load: %.260s", err);
  else ready = 1;
}

int kl_gpusort_available(char *reason, size_t n) {
  char cwhy[256] = "";
  if (!kl_cuda_available(cwhy, sizeof cwhy)) {
    if (reason) snprintf(reason, n, "%s", cwhy[0] ? cwhy : "no GPU");
    return 0;
  }
  pthread_mutex_lock(&mu);
  if (!tried) load_module();
  int ok = ready;
  pthread_mutex_unlock(&mu);
  if (!ok && reason) snprintf(reason, n, "%s", why);
  return ok;
}

typedef struct {
  char *err;
  size_t errlen;
} cuda_ctx;

static int cuda_launch(void *ctx, const char *kernel, unsigned grid, unsigned block, const uint64_t *args, int nargs) {
  cuda_ctx *cc = ctx;
  int k = 0;
  while (k < NKERNELS && strcmp(kernel_names[k], kernel)) k++;
  if (k == NKERNELS) return kl_error(cc->err, cc->errlen, KL_ERR_INTERNAL, "internal error: no sort kernel %s", kernel);
  void *ptrs[32]; /* (every kernel takes fewer) */
  if (nargs > 32) return kl_error(cc->err, cc->errlen, KL_ERR_INTERNAL, "internal error: %s takes %d arguments", kernel, nargs);
  for (int i = 0; i < nargs; i++) ptrs[i] = (void *)(uintptr_t)args[i];
  return kl_cuda_launch(functions[k], grid, block, ptrs, nargs, cc->err, cc->errlen);
}

int kl_gpusort_run(const kl_gpusort_call *c, void *const *in, void *const *out, void *scratch, char *err, size_t errlen) {
  if (!kl_gpusort_available(err, errlen)) return -1;
  cuda_ctx cc = {err, errlen};
  if (err && errlen) err[0] = 0;
  return kl_gpusort_run_with(c, in, out, scratch, cuda_launch, &cc, err, errlen);
}
