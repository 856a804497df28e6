/* hostconv.c: the CPU convolution behind the conv family (see hostconv.h). Rows of the output
 * (one per image and output position) are gathered in blocks into a patch matrix (im2col: per
 * row, each kernel tap's input channels, zeros outside the input), which one GEMM multiplies by
 * the kernel; the input gradient multiplies the output cotangent by the kernel and scatters the
 * patches back (col2im); the kernel gradient multiplies the cotangent's transpose by the patches.
 * Blocks run on kiln's CPU pool, each with a single-threaded BLAS on a patch block small enough to
 * stay in cache. A 1x1 convolution with unit strides and no padding needs no patches: the input
 * is its own patch matrix. Depends on runtime.h (the pool), hostla.h (the products) and the C
 * library only. */
#include "hostconv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/status.h"
#include "hostla.h"
#include "runtime.h"

#define PATCH_BLOCK_BYTES (1 << 21) /* a patch block's target size: an L2-sized share per thread */

/* One call's state, shared by the pool's threads (read-only but for the first failure). */
typedef struct {
  kl_hostconv_kind kind;
  kl_dtype t;   /* float32 or float64: the type the products run in */
  size_t esz;   /* its size */
  kl_conv_geom g; /* padded to 3 spatial axes (extent 1) */
  const char *a, *b;
  char *out;
  int64_t rows_per_image, taps, ig, og, kcols; /* prod(out), prod(k), c / g, o / g, taps * ig */
  int64_t rows, block;                          /* n * rows_per_image; rows per patch block */
  int64_t parts;                                /* bwd_filter: partial sums, one per unit */
  char *partials;                               /* bwd_filter: parts x (o * kcols), zeroed */
  int direct;                                   /* no patches: x is the patch matrix */
  int failed;
  char err[256];
} job;

static void note_failure(job *j, const char *msg) {
  if (j->failed) return; /* (a benign race: some message of a failed block is kept) */
  j->failed = 1;
  snprintf(j->err, sizeof j->err, "%s", msg);
}

/* Patch rows [r0, r1) of group gi into p (rows x kcols): per row, the kernel taps in row-major
 * order, each the group's ig input channels of the position it meets, zeros outside. */
static void im2col(const job *j, int64_t gi, int64_t r0, int64_t r1, char *p) {
  const kl_conv_geom *g = &j->g;
  size_t run = (size_t)j->ig * j->esz, rowbytes = (size_t)j->kcols * j->esz;
  for (int64_t r = r0; r < r1; r++) {
    int64_t n = r / j->rows_per_image, q = r % j->rows_per_image;
    int64_t o2 = q % g->out[2], o1 = (q / g->out[2]) % g->out[1], o0 = q / (g->out[2] * g->out[1]);
    char *dst = p + (size_t)(r - r0) * rowbytes;
    for (int64_t t0 = 0; t0 < g->k[0]; t0++) {
      int64_t i0 = o0 * g->stride[0] - g->lo[0] + t0 * g->dil[0];
      for (int64_t t1 = 0; t1 < g->k[1]; t1++) {
        int64_t i1 = o1 * g->stride[1] - g->lo[1] + t1 * g->dil[1];
        for (int64_t t2 = 0; t2 < g->k[2]; t2++, dst += run) {
          int64_t i2 = o2 * g->stride[2] - g->lo[2] + t2 * g->dil[2];
          if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1] || i2 < 0 || i2 >= g->in[2]) {
            memset(dst, 0, run);
            continue;
          }
          int64_t at = (((n * g->in[0] + i0) * g->in[1] + i1) * g->in[2] + i2) * g->c + gi * j->ig;
          memcpy(dst, j->a + (size_t)at * j->esz, run);
        }
      }
    }
  }
}

/* Adds patch rows [r0, r1) of group gi (p, rows x kcols) back into the input gradient dx: the
 * transpose of im2col. */
static void col2im(const job *j, int64_t gi, int64_t r0, int64_t r1, const char *p, char *dx) {
  const kl_conv_geom *g = &j->g;
  size_t rowbytes = (size_t)j->kcols * j->esz;
  int64_t ig = j->ig;
  for (int64_t r = r0; r < r1; r++) {
    int64_t n = r / j->rows_per_image, q = r % j->rows_per_image;
    int64_t o2 = q % g->out[2], o1 = (q / g->out[2]) % g->out[1], o0 = q / (g->out[2] * g->out[1]);
    const char *src = p + (size_t)(r - r0) * rowbytes;
    for (int64_t t0 = 0; t0 < g->k[0]; t0++) {
      int64_t i0 = o0 * g->stride[0] - g->lo[0] + t0 * g->dil[0];
      for (int64_t t1 = 0; t1 < g->k[1]; t1++) {
        int64_t i1 = o1 * g->stride[1] - g->lo[1] + t1 * g->dil[1];
        for (int64_t t2 = 0; t2 < g->k[2]; t2++, src += (size_t)ig * j->esz) {
          int64_t i2 = o2 * g->stride[2] - g->lo[2] + t2 * g->dil[2];
          if (i0 < 0 || i0 >= g->in[0] || i1 < 0 || i1 >= g->in[1] || i2 < 0 || i2 >= g->in[2]) continue;
          int64_t at = (((n * g->in[0] + i0) * g->in[1] + i1) * g->in[2] + i2) * g->c + gi * ig;
          if (j->t == KL_F32) {
            float *d = (float *)dx + at;
            const float *s = (const float *)src;
            for (int64_t i = 0; i < ig; i++) d[i] += s[i];
          } else {
            double *d = (double *)dx + at;
            const double *s = (const double *)src;
            for (int64_t i = 0; i < ig; i++) d[i] += s[i];
          }
        }
      }
    }
  }
}

static int gemm(job *j, int64_t m, int64_t n, int64_t k, const void *a, int64_t lda, int transa, const void *b,
                int64_t ldb, int transb, double beta, void *c, int64_t ldc) {
  char msg[256];
  if (!kl_hostla_gemm_ld(j->t, m, n, k, a, lda, transa, b, ldb, transb, beta, c, ldc, msg, sizeof msg)) return 0;
  note_failure(j, msg);
  return -1;
}

/* Forward, blocks [lo, hi) of output rows: y[rows, group's columns] = patches @ w_g^T. */
static void fwd_blocks(void *ctx, int64_t lo, int64_t hi) {
  job *j = ctx;
  char *p = j->direct ? NULL : malloc((size_t)j->block * (size_t)j->kcols * j->esz);
  if (!j->direct && !p) return note_failure(j, "conv: out of memory for a patch block");
  for (int64_t blk = lo; blk < hi && !j->failed; blk++) {
    int64_t r0 = blk * j->block, r1 = r0 + j->block < j->rows ? r0 + j->block : j->rows;
    for (int64_t gi = 0; gi < j->g.g; gi++) {
      const char *w = j->b + (size_t)(gi * j->og * j->kcols) * j->esz;
      char *y = j->out + (size_t)(r0 * j->g.o + gi * j->og) * j->esz;
      if (j->direct) {
        gemm(j, r1 - r0, j->og, j->kcols, j->a + (size_t)(r0 * j->g.c + gi * j->ig) * j->esz, j->g.c, 0, w, j->kcols,
             1, 0.0, y, j->g.o);
        continue;
      }
      im2col(j, gi, r0, r1, p);
      gemm(j, r1 - r0, j->og, j->kcols, p, j->kcols, 0, w, j->kcols, 1, 0.0, y, j->g.o);
    }
  }
  free(p);
}

/* Input gradient, images [lo, hi) (a unit owns whole images, so col2im's sums never race):
 * patches = dy[rows, group's columns] @ w_g, scattered back. */
static void bwd_data_images(void *ctx, int64_t lo, int64_t hi) {
  job *j = ctx;
  size_t image = (size_t)(j->g.in[0] * j->g.in[1] * j->g.in[2] * j->g.c) * j->esz;
  char *p = j->direct ? NULL : malloc((size_t)j->block * (size_t)j->kcols * j->esz);
  if (!j->direct && !p) return note_failure(j, "conv_bwd_data: out of memory for a patch block");
  for (int64_t n = lo; n < hi && !j->failed; n++) {
    if (!j->direct) memset(j->out + (size_t)n * image, 0, image);
    for (int64_t r0 = n * j->rows_per_image; r0 < (n + 1) * j->rows_per_image; r0 += j->block) {
      int64_t r1 = r0 + j->block < (n + 1) * j->rows_per_image ? r0 + j->block : (n + 1) * j->rows_per_image;
      for (int64_t gi = 0; gi < j->g.g; gi++) {
        const char *dy = j->a + (size_t)(r0 * j->g.o + gi * j->og) * j->esz;
        const char *w = j->b + (size_t)(gi * j->og * j->kcols) * j->esz;
        if (j->direct) {
          gemm(j, r1 - r0, j->kcols, j->og, dy, j->g.o, 0, w, j->kcols, 0, 0.0,
               j->out + (size_t)(r0 * j->g.c + gi * j->ig) * j->esz, j->g.c);
          continue;
        }
        if (gemm(j, r1 - r0, j->kcols, j->og, dy, j->g.o, 0, w, j->kcols, 0, 0.0, p, j->kcols)) break;
        col2im(j, gi, r0, r1, p, j->out);
      }
    }
  }
  free(p);
}

/* Kernel gradient, partial sums [lo, hi): part u sums its share of the rows,
 * dw_g += dy[rows, group's columns]^T @ patches. */
static void bwd_filter_parts(void *ctx, int64_t lo, int64_t hi) {
  job *j = ctx;
  char *p = j->direct ? NULL : malloc((size_t)j->block * (size_t)j->kcols * j->esz);
  if (!j->direct && !p) return note_failure(j, "conv_bwd_filter: out of memory for a patch block");
  size_t wbytes = (size_t)(j->g.o * j->kcols) * j->esz;
  for (int64_t u = lo; u < hi && !j->failed; u++) {
    char *acc = j->partials + (size_t)u * wbytes;
    int64_t share = (j->rows + j->parts - 1) / j->parts, end = (u + 1) * share < j->rows ? (u + 1) * share : j->rows;
    for (int64_t r0 = u * share; r0 < end; r0 += j->block) {
      int64_t r1 = r0 + j->block < end ? r0 + j->block : end;
      for (int64_t gi = 0; gi < j->g.g; gi++) {
        const char *dy = j->b + (size_t)(r0 * j->g.o + gi * j->og) * j->esz;
        const char *patches = j->direct ? j->a + (size_t)(r0 * j->g.c + gi * j->ig) * j->esz : p;
        int64_t ldp = j->direct ? j->g.c : j->kcols;
        if (!j->direct) im2col(j, gi, r0, r1, p);
        gemm(j, j->og, j->kcols, r1 - r0, dy, j->g.o, 1, patches, ldp, 0, 1.0, acc + (size_t)(gi * j->og * j->kcols) * j->esz,
             j->kcols);
      }
    }
  }
  free(p);
}

static const char *const names[] = {"conv_general_dilated", "conv_bwd_data", "conv_bwd_filter"};

/* The convolution in float32 or float64. */
static int conv_native(job *j, char *err, size_t errlen) {
  int threads = kl_rt_num_threads();
  size_t wbytes = (size_t)(j->g.o * j->kcols) * j->esz;
  int64_t units = 0;
  void (*fn)(void *, int64_t, int64_t) = NULL;
  if (j->kind == KL_HOSTCONV_FWD) {
    units = (j->rows + j->block - 1) / j->block;
    fn = fwd_blocks;
  } else if (j->kind == KL_HOSTCONV_BWD_DATA) {
    units = j->g.n;
    fn = bwd_data_images;
  } else {
    int64_t blocks = (j->rows + j->block - 1) / j->block;
    j->parts = blocks < threads ? blocks : threads;
    if (j->parts < 1) j->parts = 1;
    units = j->parts;
    fn = bwd_filter_parts;
    j->partials = j->parts == 1 ? j->out : calloc((size_t)j->parts, wbytes);
    if (!j->partials) return kl_error(err, errlen, KL_ERR_NOMEM, "conv_bwd_filter: out of memory for %lld partial sums",
                                      (long long)j->parts);
    if (j->parts == 1) memset(j->out, 0, wbytes);
  }
  int saved = threads > 1 && units > 1 ? kl_hostla_blas_serial_begin() : 0;
  if (units > 1) kl_rt_parallel_for(units, fn, j);
  else if (units == 1) fn(j, 0, 1);
  kl_hostla_blas_serial_end(saved);
  if (j->kind == KL_HOSTCONV_BWD_FILTER && j->parts > 1) {
    int64_t count = j->g.o * j->kcols;
    for (int64_t u = 1; u < j->parts; u++)
      for (int64_t i = 0; i < count; i++) {
        if (j->t == KL_F32) ((float *)j->partials)[i] += ((float *)j->partials)[u * count + i];
        else ((double *)j->partials)[i] += ((double *)j->partials)[u * count + i];
      }
    memcpy(j->out, j->partials, wbytes);
    free(j->partials);
  }
  if (j->failed) return kl_error(err, errlen, KL_ERR_INTERNAL, "%s: %s", names[j->kind], j->err);
  return 0;
}

int kl_host_conv(kl_hostconv_kind kind, kl_dtype t, const kl_conv_geom *geom, const void *a, const void *b, void *out,
                 char *err, size_t errlen) {
  if (kind < KL_HOSTCONV_FWD || kind > KL_HOSTCONV_BWD_FILTER || geom->nd < 1 || geom->nd > 3 || geom->g < 1 ||
      geom->c % geom->g || geom->o % geom->g)
    return kl_error(err, errlen, KL_ERR_INTERNAL, "internal error: host convolution kind %d, rank %d, groups %lld",
                    (int)kind, geom->nd, (long long)geom->g);
  if (t != KL_F32 && t != KL_F64 && t != KL_F16 && t != KL_BF16)
    return kl_error(err, errlen, KL_ERR_UNSUPPORTED, "%s: the CPU routine takes floating operands, got %s (the "
                    "composed lax.conv_general_dilated handles the others)", names[kind], kl_dtype_name(t));
  job j = {.kind = kind, .t = t == KL_F64 ? KL_F64 : KL_F32, .a = a, .b = b, .out = out};
  j.esz = j.t == KL_F64 ? 8 : 4;
  j.g = *geom;
  for (int d = geom->nd; d < 3; d++) {
    j.g.in[d] = j.g.k[d] = j.g.out[d] = j.g.stride[d] = j.g.dil[d] = 1;
    j.g.lo[d] = 0;
  }
  j.rows_per_image = j.g.out[0] * j.g.out[1] * j.g.out[2];
  j.taps = j.g.k[0] * j.g.k[1] * j.g.k[2];
  j.ig = j.g.c / j.g.g;
  j.og = j.g.o / j.g.g;
  j.kcols = j.taps * j.ig;
  j.rows = j.g.n * j.rows_per_image;
  j.direct = j.taps == 1;
  for (int d = 0; d < 3; d++) j.direct &= j.g.stride[d] == 1 && j.g.lo[d] == 0 && j.g.out[d] == j.g.in[d];
  j.block = (int64_t)(PATCH_BLOCK_BYTES / ((size_t)(j.kcols ? j.kcols : 1) * j.esz));
  if (j.block < 64) j.block = 64;
  if (j.direct) j.block *= 4; /* no patches to keep in cache: larger products */
  if (j.rows == 0 || j.g.o == 0 || j.g.c == 0) { /* nothing to sum: zeros */
    int64_t count = kind == KL_HOSTCONV_FWD ? j.rows * j.g.o
                    : kind == KL_HOSTCONV_BWD_DATA ? j.g.n * j.g.in[0] * j.g.in[1] * j.g.in[2] * j.g.c
                                                   : j.g.o * j.kcols;
    memset(out, 0, (size_t)count * (t == KL_F64 ? 8 : t == KL_F32 ? 4 : 2));
    return 0;
  }
  if (t == KL_F32 || t == KL_F64) return conv_native(&j, err, errlen);
  /* float16/bfloat16: in float32, rounded once at the end */
  int64_t xs = j.g.n * j.g.in[0] * j.g.in[1] * j.g.in[2] * j.g.c, ys = j.rows * j.g.o, ws = j.g.o * j.kcols;
  int64_t na = kind == KL_HOSTCONV_BWD_DATA ? ys : xs;
  int64_t nb = kind == KL_HOSTCONV_FWD ? ws : kind == KL_HOSTCONV_BWD_DATA ? ws : ys;
  int64_t no = kind == KL_HOSTCONV_FWD ? ys : kind == KL_HOSTCONV_BWD_DATA ? xs : ws;
  float *fa = malloc((size_t)na * 4), *fb = malloc((size_t)nb * 4), *fo = malloc((size_t)no * 4);
  int rc;
  if (!fa || !fb || !fo) {
    rc = kl_error(err, errlen, KL_ERR_NOMEM, "%s: out of memory converting %s operands to float32", names[kind],
                  kl_dtype_name(t));
  } else {
    kl_hostla_half_to_f32(t, a, fa, na);
    kl_hostla_half_to_f32(t, b, fb, nb);
    j.a = (const char *)fa, j.b = (const char *)fb, j.out = (char *)fo;
    rc = conv_native(&j, err, errlen);
    if (!rc) kl_hostla_f32_to_half(t, fo, out, no);
  }
  free(fa);
  free(fb);
  free(fo);
  return rc;
}
