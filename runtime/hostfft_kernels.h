/* hostfft_kernels.h: the FFT kernels of hostfft.c for one real type and instruction set,
 * included by hostfft.c (only) with R (float or double), KL_SFX (the name suffix), KL_VEC (the
 * SIMD tile width, 0 for none) and KL_TARGET (function attributes) defined. No include guard:
 * it is meant to be included once per variant. */
#ifndef KL_FFT_TEMPLATE
#error "hostfft_kernels.h is included by hostfft.c only"
#endif

#define F(name) KL_CAT(name, KL_SFX)
#define KFN static KL_TARGET
/* (xr, xi) *= (wr, wi) */
#define CMUL(xr, xi, wr, wi)                                                   \
  do {                                                                         \
    R t_ = (xr) * (wr) - (xi) * (wi);                                          \
    (xi) = (xr) * (wi) + (xi) * (wr);                                          \
    (xr) = t_;                                                                 \
  } while (0)

/* Stockham passes. The lane block holds `len` rows of B reals (one per
 * lane); a pass with m = len / r groups reads x[(q + s (p + j m)) B + i] and
 * writes y[(q + s (r p + k)) B + i]: for fixed p and j every q and lane i
 * form one contiguous run of s B = `run` reals. The butterflies below do one
 * run; `twid` is a constant at every call, so each pass gets a loop without
 * twiddles (its last pass, m == 1) and one with. */
#define BFN static inline KL_ALWAYS_INLINE KL_TARGET void
BFN F(bf2)(size_t run, size_t st, const R *restrict xr, const R *restrict xi,
           R *restrict yr, R *restrict yi, const R *w, const int twid) {
  KL_IVDEP
  for (size_t i = 0; i < run; i++) {
    R ar = xr[i], ai = xi[i], br = xr[st + i], bi = xi[st + i];
    yr[i] = ar + br;
    yi[i] = ai + bi;
    R dr = ar - br, di = ai - bi;
    if (twid) CMUL(dr, di, w[0], w[1]);
    yr[run + i] = dr;
    yi[run + i] = di;
  }
}

BFN F(bf3)(size_t run, size_t st, const R *restrict xr, const R *restrict xi,
           R *restrict yr, R *restrict yi, const R *w, const int twid) {
  const R h = (R)0.866025403784438646763723170752936183; /* sin(pi/3) */
  KL_IVDEP
  for (size_t i = 0; i < run; i++) {
    R a0r = xr[i], a0i = xi[i], a1r = xr[st + i], a1i = xi[st + i];
    R a2r = xr[2 * st + i], a2i = xi[2 * st + i];
    R sr = a1r + a2r, si = a1i + a2i, dr = (a1r - a2r) * h, di = (a1i - a2i) * h;
    R mr = a0r - (R)0.5 * sr, mi = a0i - (R)0.5 * si;
    R c1r = mr + di, c1i = mi - dr, c2r = mr - di, c2i = mi + dr;
    yr[i] = a0r + sr;
    yi[i] = a0i + si;
    if (twid) {
      CMUL(c1r, c1i, w[0], w[1]);
      CMUL(c2r, c2i, w[2], w[3]);
    }
    yr[run + i] = c1r;
    yi[run + i] = c1i;
    yr[2 * run + i] = c2r;
    yi[2 * run + i] = c2i;
  }
}

BFN F(bf4)(size_t run, size_t st, const R *restrict xr, const R *restrict xi,
           R *restrict yr, R *restrict yi, const R *w, const int twid) {
  KL_IVDEP
  for (size_t i = 0; i < run; i++) {
    R a0r = xr[i], a0i = xi[i], a1r = xr[st + i], a1i = xi[st + i];
    R a2r = xr[2 * st + i], a2i = xi[2 * st + i], a3r = xr[3 * st + i], a3i = xi[3 * st + i];
    R t0r = a0r + a2r, t0i = a0i + a2i, t1r = a0r - a2r, t1i = a0i - a2i;
    R t2r = a1r + a3r, t2i = a1i + a3i, t3r = a1i - a3i, t3i = a3r - a1r;
    R c1r = t1r + t3r, c1i = t1i + t3i, c2r = t0r - t2r, c2i = t0i - t2i;
    R c3r = t1r - t3r, c3i = t1i - t3i;
    yr[i] = t0r + t2r;
    yi[i] = t0i + t2i;
    if (twid) {
      CMUL(c1r, c1i, w[0], w[1]);
      CMUL(c2r, c2i, w[2], w[3]);
      CMUL(c3r, c3i, w[4], w[5]);
    }
    yr[run + i] = c1r;
    yi[run + i] = c1i;
    yr[2 * run + i] = c2r;
    yi[2 * run + i] = c2i;
    yr[3 * run + i] = c3r;
    yi[3 * run + i] = c3i;
  }
}

BFN F(bf5)(size_t run, size_t st, const R *restrict xr, const R *restrict xi,
           R *restrict yr, R *restrict yi, const R *w, const int twid) {
  const R c1 = (R)0.309016994374947424102293417182819059;  /* cos(2pi/5) */
  const R c2 = (R)-0.809016994374947424102293417182819059; /* cos(4pi/5) */
  const R s1 = (R)0.951056516295153572116439333379382143;  /* sin(2pi/5) */
  const R s2 = (R)0.587785252292473129168705954639072769;  /* sin(4pi/5) */
  KL_IVDEP
  for (size_t i = 0; i < run; i++) {
    R a0r = xr[i], a0i = xi[i], a1r = xr[st + i], a1i = xi[st + i];
    R a2r = xr[2 * st + i], a2i = xi[2 * st + i], a3r = xr[3 * st + i], a3i = xi[3 * st + i];
    R a4r = xr[4 * st + i], a4i = xi[4 * st + i];
    R s1r = a1r + a4r, s1i = a1i + a4i, d1r = a1r - a4r, d1i = a1i - a4i;
    R s2r = a2r + a3r, s2i = a2i + a3i, d2r = a2r - a3r, d2i = a2i - a3i;
    R A1r = a0r + c1 * s1r + c2 * s2r, A1i = a0i + c1 * s1i + c2 * s2i;
    R A2r = a0r + c2 * s1r + c1 * s2r, A2i = a0i + c2 * s1i + c1 * s2i;
    R B1r = s1 * d1r + s2 * d2r, B1i = s1 * d1i + s2 * d2i;
    R B2r = s2 * d1r - s1 * d2r, B2i = s2 * d1i - s1 * d2i;
    R o1r = A1r + B1i, o1i = A1i - B1r, o4r = A1r - B1i, o4i = A1i + B1r;
    R o2r = A2r + B2i, o2i = A2i - B2r, o3r = A2r - B2i, o3i = A2i + B2r;
    yr[i] = a0r + s1r + s2r;
    yi[i] = a0i + s1i + s2i;
    if (twid) {
      CMUL(o1r, o1i, w[0], w[1]);
      CMUL(o2r, o2i, w[2], w[3]);
      CMUL(o3r, o3i, w[4], w[5]);
      CMUL(o4r, o4i, w[6], w[7]);
    }
    yr[run + i] = o1r;
    yi[run + i] = o1i;
    yr[2 * run + i] = o2r;
    yi[2 * run + i] = o2i;
    yr[3 * run + i] = o3r;
    yi[3 * run + i] = o3i;
    yr[4 * run + i] = o4r;
    yi[4 * run + i] = o4i;
  }
}

/* One radix-r pass (r = 2..5) of m groups: group p reads rows p + j m and
 * writes rows r p + k (rows of `run` reals), twiddled by tw[p (r-1) + k-1]. */
#define DEFINE_PASS(r)                                                         \
  KFN void F(pass##r)(size_t m, size_t run, const R *restrict tw,              \
                      const R *restrict xr, const R *restrict xi,              \
                      R *restrict yr, R *restrict yi) {                        \
    const size_t st = m * run;                                                 \
    if (m == 1) F(bf##r)(run, st, xr, xi, yr, yi, tw, 0);                      \
    for (size_t p = 0; m > 1 && p < m; p++)                                    \
      F(bf##r)(run, st, xr + p * run, xi + p * run, yr + r * p * run,          \
               yi + r * p * run, tw + 2 * (r - 1) * p, 1);                     \
  }
DEFINE_PASS(2)
DEFINE_PASS(3)
DEFINE_PASS(4)
DEFINE_PASS(5)
#undef DEFINE_PASS
#undef BFN

/* Any odd prime r: c_k = A_k - i B_k and c_(r-k) = A_k + i B_k, with
 * A_k = a_0 + sum_j (a_j + a_(r-j)) cos(2 pi jk/r) and
 * B_k = sum_j (a_j - a_(r-j)) sin(2 pi jk/r); A_k and B_k are summed in
 * y_k and y_(r-k) first. */
KFN void F(passg)(size_t r, size_t m, size_t run, const R *restrict tw,
                  const R *restrict xr, const R *restrict xi,
                  R *restrict yr, R *restrict yi) {
  const size_t st = m * run, h = (r - 1) / 2;
  const R *cs = tw + 2 * (r - 1) * m;
  for (size_t p = 0; p < m; p++) {
    const R *w = tw + 2 * (r - 1) * p;
    const size_t a = p * run, o = r * p * run;
    for (size_t i = 0; i < run; i++) yr[o + i] = xr[a + i], yi[o + i] = xi[a + i];
    for (size_t k = 1; k <= h; k++)
      KL_IVDEP
      for (size_t i = 0; i < run; i++) {
        yr[o + k * run + i] = xr[a + i], yi[o + k * run + i] = xi[a + i];
        yr[o + (r - k) * run + i] = 0, yi[o + (r - k) * run + i] = 0;
      }
    for (size_t j = 1; j <= h; j++) {
      const size_t u = a + j * st, v = a + (r - j) * st;
      KL_IVDEP
      for (size_t i = 0; i < run; i++)
        yr[o + i] += xr[u + i] + xr[v + i], yi[o + i] += xi[u + i] + xi[v + i];
      for (size_t k = 1; k <= h; k++) {
        const R c = cs[2 * ((j - 1) * h + k - 1)], s = cs[2 * ((j - 1) * h + k - 1) + 1];
        const size_t ya = o + k * run, yb = o + (r - k) * run;
        KL_IVDEP
        for (size_t i = 0; i < run; i++) {
          yr[ya + i] += (xr[u + i] + xr[v + i]) * c;
          yi[ya + i] += (xi[u + i] + xi[v + i]) * c;
          yr[yb + i] += (xr[u + i] - xr[v + i]) * s;
          yi[yb + i] += (xi[u + i] - xi[v + i]) * s;
        }
      }
    }
    for (size_t k = 1; k <= h; k++) {
      const size_t ya = o + k * run, yb = o + (r - k) * run;
      const R war = w[2 * (k - 1)], wai = w[2 * (k - 1) + 1];
      const R wbr = w[2 * (r - k - 1)], wbi = w[2 * (r - k - 1) + 1];
      KL_IVDEP
      for (size_t i = 0; i < run; i++) {
        R Ar = yr[ya + i], Ai = yi[ya + i], Br = yr[yb + i], Bi = yi[yb + i];
        R ur = Ar + Bi, ui = Ai - Br, vr = Ar - Bi, vi = Ai + Br;
        CMUL(ur, ui, war, wai);
        CMUL(vr, vi, wbr, wbi);
        yr[ya + i] = ur, yi[ya + i] = ui, yr[yb + i] = vr, yi[yb + i] = vi;
      }
    }
  }
}

KFN int F(exec)(const plan *pl, R *const *buf, size_t B);

/* Bluestein on a lane block: rows 0..n-1 of pair 0 in, rows 0..n-1 of the
 * returned pair out (rows up to m are used). */
KFN int F(bluestein_lanes)(const plan *pl, R *const *buf, size_t B) {
  const size_t n = (size_t)pl->n, m = (size_t)pl->m;
  const R *c = pl->chirp, *bh = pl->bhat;
  R *xr = buf[0], *xi = buf[1];
  for (size_t j = 0; j < n; j++)
    for (size_t b = 0; b < B; b++) CMUL(xr[j * B + b], xi[j * B + b], c[2 * j], c[2 * j + 1]);
  memset(xr + n * B, 0, (m - n) * B * sizeof(R));
  memset(xi + n * B, 0, (m - n) * B * sizeof(R));
  int p = F(exec)(pl->sub, buf, B);
  R *zr = buf[2 * p], *zi = buf[2 * p + 1];
  for (size_t k = 0; k < m; k++)
    for (size_t b = 0; b < B; b++) CMUL(zr[k * B + b], zi[k * B + b], bh[2 * k], bh[2 * k + 1]);
  R *sw[4] = {buf[2 * p + 1], buf[2 * p], buf[3 - 2 * p], buf[2 - 2 * p]};
  p = F(exec)(pl->sub, sw, B) ? 1 - p : p; /* the inverse, on (im, re) */
  zr = buf[2 * p], zi = buf[2 * p + 1];
  for (size_t j = 0; j < n; j++)
    for (size_t b = 0; b < B; b++) CMUL(zr[j * B + b], zi[j * B + b], c[2 * j], c[2 * j + 1]);
  return p;
}

/* Forward DFT of B lanes: row j of lane b at buf[0][j B + b] (re) and
 * buf[1][j B + b] (im); buf[2], buf[3] are the second pair. Returns the pair
 * (0 or 1) that holds the result. */
KFN int F(exec)(const plan *pl, R *const *buf, size_t B) {
  if (pl->kind == PLAN_BLUESTEIN) return F(bluestein_lanes)(pl, buf, B);
  int cur = 0;
  size_t len = (size_t)pl->n, s = 1;
  for (int k = 0; k < pl->npass; k++) {
    const size_t r = (size_t)pl->radix[k], m = len / r, run = s * B;
    const R *tw = pl->tw[k];
    R *xr = buf[2 * cur], *xi = buf[2 * cur + 1], *yr = buf[2 - 2 * cur], *yi = buf[3 - 2 * cur];
    switch (r) {
    case 2: F(pass2)(m, run, tw, xr, xi, yr, yi); break;
    case 3: F(pass3)(m, run, tw, xr, xi, yr, yi); break;
    case 4: F(pass4)(m, run, tw, xr, xi, yr, yi); break;
    case 5: F(pass5)(m, run, tw, xr, xi, yr, yi); break;
    default: F(passg)(r, m, run, tw, xr, xi, yr, yi); break;
    }
    cur = 1 - cur;
    len = m;
    s *= r;
  }
  return cur;
}

#if KL_VEC == 8 /* float, AVX2: 8 lanes x 4 complex per tile */
#define TILE_J 4
/* Transposes the 8 x 8 floats in v (row k becomes column k). */
static inline KL_ALWAYS_INLINE KL_TARGET void tile_transpose_f32(__m256 *v) {
  __m256 t[8], u[8];
  for (int k = 0; k < 8; k += 2) {
    t[k] = _mm256_unpacklo_ps(v[k], v[k + 1]);
    t[k + 1] = _mm256_unpackhi_ps(v[k], v[k + 1]);
  }
  for (int k = 0; k < 8; k += 4) {
    u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);
    u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xee);
    u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);
    u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xee);
  }
  for (int k = 0; k < 4; k++) {
    v[k] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x20);
    v[k + 4] = _mm256_permute2f128_ps(u[k], u[k + 4], 0x31);
  }
}
/* Lanes 0..7 of a tile: entries j0..j0+3 of line k at src[2 (k bs + j)]. */
static inline KL_ALWAYS_INLINE KL_TARGET void tile_gather_f32(
    const float *src, ptrdiff_t bs, size_t j0, size_t B, float *re, float *im) {
  __m256 v[8];
  for (int k = 0; k < 8; k++) v[k] = _mm256_loadu_ps(src + 2 * (k * bs + (ptrdiff_t)j0));
  tile_transpose_f32(v);
  for (int k = 0; k < 4; k++) {
    _mm256_storeu_ps(re + (j0 + (size_t)k) * B, v[2 * k]);
    _mm256_storeu_ps(im + (j0 + (size_t)k) * B, v[2 * k + 1]);
  }
}
static inline KL_ALWAYS_INLINE KL_TARGET void tile_scatter_f32(
    float *dst, ptrdiff_t bs, size_t j0, size_t B, const float *re,
    const float *im, float scale) {
  __m256 v[8], s = _mm256_set1_ps(scale);
  for (int k = 0; k < 4; k++) {
    v[2 * k] = _mm256_mul_ps(_mm256_loadu_ps(re + (j0 + (size_t)k) * B), s);
    v[2 * k + 1] = _mm256_mul_ps(_mm256_loadu_ps(im + (j0 + (size_t)k) * B), s);
  }
  tile_transpose_f32(v);
  for (int k = 0; k < 8; k++) _mm256_storeu_ps(dst + 2 * (k * bs + (ptrdiff_t)j0), v[k]);
}
#define tile_gather tile_gather_f32
#define tile_scatter tile_scatter_f32
#elif KL_VEC == 4 /* double, AVX2: 4 lanes x 2 complex per tile */
#define TILE_J 2
static inline KL_ALWAYS_INLINE KL_TARGET void tile_transpose_f64(__m256d *v) {
  __m256d t0 = _mm256_unpacklo_pd(v[0], v[1]), t1 = _mm256_unpackhi_pd(v[0], v[1]);
  __m256d t2 = _mm256_unpacklo_pd(v[2], v[3]), t3 = _mm256_unpackhi_pd(v[2], v[3]);
  v[0] = _mm256_permute2f128_pd(t0, t2, 0x20);
  v[1] = _mm256_permute2f128_pd(t1, t3, 0x20);
  v[2] = _mm256_permute2f128_pd(t0, t2, 0x31);
  v[3] = _mm256_permute2f128_pd(t1, t3, 0x31);
}
static inline KL_ALWAYS_INLINE KL_TARGET void tile_gather_f64(
    const double *src, ptrdiff_t bs, size_t j0, size_t B, double *re, double *im) {
  __m256d v[4];
  for (int k = 0; k < 4; k++) v[k] = _mm256_loadu_pd(src + 2 * (k * bs + (ptrdiff_t)j0));
  tile_transpose_f64(v);
  for (int k = 0; k < 2; k++) {
    _mm256_storeu_pd(re + (j0 + (size_t)k) * B, v[2 * k]);
    _mm256_storeu_pd(im + (j0 + (size_t)k) * B, v[2 * k + 1]);
  }
}
static inline KL_ALWAYS_INLINE KL_TARGET void tile_scatter_f64(
    double *dst, ptrdiff_t bs, size_t j0, size_t B, const double *re,
    const double *im, double scale) {
  __m256d v[4], s = _mm256_set1_pd(scale);
  for (int k = 0; k < 2; k++) {
    v[2 * k] = _mm256_mul_pd(_mm256_loadu_pd(re + (j0 + (size_t)k) * B), s);
    v[2 * k + 1] = _mm256_mul_pd(_mm256_loadu_pd(im + (j0 + (size_t)k) * B), s);
  }
  tile_transpose_f64(v);
  for (int k = 0; k < 4; k++) _mm256_storeu_pd(dst + 2 * (k * bs + (ptrdiff_t)j0), v[k]);
}
#define tile_gather tile_gather_f64
#define tile_scatter tile_scatter_f64
#endif

/* Complex interleaved src, entry j of lane b at src[2 (j js + b bs)], into
 * the lane block (row stride B). Lines far apart in memory (js large: the
 * rows of a column block, each on its own page) are prefetched ahead: the
 * hardware prefetcher does not cross pages. */
KFN void F(gather_c)(const R *restrict src, ptrdiff_t js, ptrdiff_t bs,
                     size_t n, size_t B, R *restrict re, R *restrict im) {
  if (bs == 1 || B == 1) {
    const size_t ahead = js >= 256 ? 8 : n;
    for (size_t j = 0; j < n; j++) {
      const R *s = src + 2 * (ptrdiff_t)j * js;
      if (j + ahead < n) KL_PREFETCH(s + 2 * (ptrdiff_t)ahead * js);
      for (size_t b = 0; b < B; b++) re[j * B + b] = s[2 * b], im[j * B + b] = s[2 * b + 1];
    }
    return;
  }
  size_t b0 = 0;
#ifdef TILE_J
  for (; js == 1 && b0 + KL_VEC <= B; b0 += KL_VEC) {
    const R *s = src + 2 * (ptrdiff_t)b0 * bs;
    size_t j = 0;
    for (; j + TILE_J <= n; j += TILE_J) tile_gather(s, bs, j, B, re + b0, im + b0);
    for (; j < n; j++)
      for (size_t b = 0; b < KL_VEC; b++)
        re[j * B + b0 + b] = s[2 * ((ptrdiff_t)b * bs + (ptrdiff_t)j)],
        im[j * B + b0 + b] = s[2 * ((ptrdiff_t)b * bs + (ptrdiff_t)j) + 1];
  }
#endif
  for (size_t b = b0; b < B; b++) {
    const R *s = src + 2 * (ptrdiff_t)b * bs;
    for (size_t j = 0; j < n; j++)
      re[j * B + b] = s[2 * (ptrdiff_t)j * js], im[j * B + b] = s[2 * (ptrdiff_t)j * js + 1];
  }
}

KFN void F(scatter_c)(R *restrict dst, ptrdiff_t js, ptrdiff_t bs, size_t n,
                      size_t B, const R *restrict re, const R *restrict im,
                      R scale) {
  if (bs == 1 || B == 1) {
    for (size_t j = 0; j < n; j++) {
      R *d = dst + 2 * (ptrdiff_t)j * js;
      if (scale != 1)
        for (size_t b = 0; b < B; b++) d[2 * b] = re[j * B + b] * scale, d[2 * b + 1] = im[j * B + b] * scale;
      else
        for (size_t b = 0; b < B; b++) d[2 * b] = re[j * B + b], d[2 * b + 1] = im[j * B + b];
    }
    return;
  }
  size_t b0 = 0;
#ifdef TILE_J
  for (; js == 1 && b0 + KL_VEC <= B; b0 += KL_VEC) {
    R *d = dst + 2 * (ptrdiff_t)b0 * bs;
    size_t j = 0;
    for (; j + TILE_J <= n; j += TILE_J) tile_scatter(d, bs, j, B, re + b0, im + b0, scale);
    for (; j < n; j++)
      for (size_t b = 0; b < KL_VEC; b++)
        d[2 * ((ptrdiff_t)b * bs + (ptrdiff_t)j)] = re[j * B + b0 + b] * scale,
        d[2 * ((ptrdiff_t)b * bs + (ptrdiff_t)j) + 1] = im[j * B + b0 + b] * scale;
  }
#endif
  for (size_t b = b0; b < B; b++) {
    R *d = dst + 2 * (ptrdiff_t)b * bs;
    for (size_t j = 0; j < n; j++)
      d[2 * (ptrdiff_t)j * js] = re[j * B + b] * scale, d[2 * (ptrdiff_t)j * js + 1] = im[j * B + b] * scale;
  }
}

/* Real lines (entry j of lane b at src[j + b bs]) as complex with im = 0. */
KFN void F(gather_r)(const R *restrict src, ptrdiff_t bs, size_t n, size_t B,
                     R *restrict re, R *restrict im) {
  for (size_t b = 0; b < B; b++)
    for (size_t j = 0; j < n; j++) re[j * B + b] = src[(ptrdiff_t)b * bs + (ptrdiff_t)j];
  memset(im, 0, n * B * sizeof(R));
}

KFN void F(scatter_r)(R *restrict dst, ptrdiff_t bs, size_t n, size_t B,
                      const R *restrict re, R scale) {
  for (size_t b = 0; b < B; b++)
    for (size_t j = 0; j < n; j++) dst[(ptrdiff_t)b * bs + (ptrdiff_t)j] = re[j * B + b] * scale;
}

/* In place, entry (k, b) at re/im[k rs + b]: Z (M entries), the DFT of
 * z_j = x_2j + i x_2j+1, becomes X_0..X_M, the half spectrum of the real x:
 * X_k = E_k + W_2M^k O_k, X_(M-k) = conj(E_k - W_2M^k O_k), with
 * E_k = (Z_k + conj Z_(M-k)) / 2, O_k = (Z_k - conj Z_(M-k)) / 2i. */
KFN void F(r2c_post)(R *re, R *im, size_t rs, size_t M, size_t nb, const R *half) {
  for (size_t b = 0; b < nb; b++) {
    R zr = re[b], zi = im[b];
    re[b] = zr + zi, im[b] = 0, re[M * rs + b] = zr - zi, im[M * rs + b] = 0;
  }
  for (size_t k = 1; 2 * k <= M; k++) {
    const R wr = half[2 * k], wi = half[2 * k + 1];
    R *ar = re + k * rs, *ai = im + k * rs, *br = re + (M - k) * rs, *bi = im + (M - k) * rs;
    for (size_t b = 0; b < nb; b++) {
      R zkr = ar[b], zki = ai[b], zmr = br[b], zmi = bi[b];
      R er = (zkr + zmr) * (R)0.5, ei = (zki - zmi) * (R)0.5;
      R pr = (zki + zmi) * (R)0.5, pi = (zmr - zkr) * (R)0.5;
      CMUL(pr, pi, wr, wi);
      ar[b] = er + pr, ai[b] = ei + pi, br[b] = er - pr, bi[b] = pi - ei;
    }
  }
}

/* The inverse of r2c_post up to a factor 2 (the imaginary parts of X_0 and
 * X_M ignored): Z_k = E_k + i Q_k, Z_(M-k) = conj(E_k - i Q_k), with
 * E_k = X_k + conj X_(M-k), Q_k = (X_k - conj X_(M-k)) conj(W_2M^k). */
KFN void F(c2r_pre)(R *re, R *im, size_t rs, size_t M, size_t nb, const R *half) {
  for (size_t b = 0; b < nb; b++) {
    R x0 = re[b], xm = re[M * rs + b];
    re[b] = x0 + xm, im[b] = x0 - xm;
  }
  for (size_t k = 1; 2 * k <= M; k++) {
    const R wr = half[2 * k], wi = -half[2 * k + 1];
    R *ar = re + k * rs, *ai = im + k * rs, *br = re + (M - k) * rs, *bi = im + (M - k) * rs;
    for (size_t b = 0; b < nb; b++) {
      R xkr = ar[b], xki = ai[b], xmr = br[b], xmi = bi[b];
      R er = xkr + xmr, ei = xki - xmi, qr = xkr - xmr, qi = xki + xmi;
      CMUL(qr, qi, wr, wi);
      ar[b] = er - qi, ai[b] = ei + qr, br[b] = er + qi, bi[b] = qr - ei;
    }
  }
}

/* Rows nc..n-1 from the Hermitian symmetry X_k = conj X_(n-k). */
KFN void F(herm_fill)(R *re, R *im, size_t rs, size_t n, size_t nc, size_t nb) {
  for (size_t k = nc; k < n; k++)
    for (size_t b = 0; b < nb; b++)
      re[k * rs + b] = re[(n - k) * rs + b], im[k * rs + b] = -im[(n - k) * rs + b];
}

/* Blocks [b0, b1) of a lane job: each block's lines are gathered into the
 * lane block, transformed together and stored. */
KFN void F(blocks)(const axis_job *jb, int64_t b0, int64_t b1, void *scratch) {
  const plan *pl = jb->pl;
  const size_t B = (size_t)jb->B, rows = (size_t)jb->rows;
  const size_t a = LANE_ARRAY(rows, B);
  R *r0 = scratch, *i0 = r0 + a, *r1 = i0 + a, *i1 = r1 + a;
  R *bf[4] = {r0, i0, r1, i1}, *sw[4] = {i0, r0, i1, r1};
  R *const *run = jb->swap ? sw : bf;
  const R scale = (R)jb->scale;
  const int64_t n = jb->n, nc = jb->nc, S = jb->inner, M = n / 2;
  const R *src = jb->src;
  R *dst = jb->dst;
  for (int64_t blk = b0; blk < b1; blk++) {
    int64_t first, nb;
    if (S == 1) {
      first = blk * (int64_t)B;
      nb = jb->outer - first < (int64_t)B ? jb->outer - first : (int64_t)B;
    } else {
      int64_t s0 = blk % jb->sblocks * (int64_t)B;
      first = blk / jb->sblocks * n * S + s0;
      nb = S - s0 < (int64_t)B ? S - s0 : (int64_t)B;
    }
    int p;
    if (jb->op == AX_C2C) {
      ptrdiff_t js = S == 1 ? 1 : S, bs = S == 1 ? n : 1, off = 2 * (S == 1 ? first * n : first);
      F(gather_c)(src + off, js, bs, (size_t)n, (size_t)nb, r0, i0);
      p = F(exec)(pl, run, (size_t)nb);
      F(scatter_c)(dst + off, js, bs, (size_t)n, (size_t)nb, bf[2 * p], bf[2 * p + 1], scale);
    } else if (jb->op == AX_R2C && n % 2 == 0) {
      F(gather_c)(src + first * n, 1, M, (size_t)M, (size_t)nb, r0, i0);
      p = F(exec)(pl, run, (size_t)nb);
      F(r2c_post)(bf[2 * p], bf[2 * p + 1], (size_t)nb, (size_t)M, (size_t)nb, pl->half);
      F(scatter_c)(dst + 2 * first * nc, 1, nc, (size_t)nc, (size_t)nb, bf[2 * p], bf[2 * p + 1], scale);
    } else if (jb->op == AX_R2C) {
      F(gather_r)(src + first * n, n, (size_t)n, (size_t)nb, r0, i0);
      p = F(exec)(pl, run, (size_t)nb);
      F(scatter_c)(dst + 2 * first * nc, 1, nc, (size_t)nc, (size_t)nb, bf[2 * p], bf[2 * p + 1], scale);
    } else if (n % 2 == 0) { /* C2R */
      F(gather_c)(src + 2 * first * nc, 1, nc, (size_t)nc, (size_t)nb, r0, i0);
      F(c2r_pre)(r0, i0, (size_t)nb, (size_t)M, (size_t)nb, pl->half);
      p = F(exec)(pl, run, (size_t)nb);
      F(scatter_c)(dst + first * n, 1, M, (size_t)M, (size_t)nb, bf[2 * p], bf[2 * p + 1], scale);
    } else {
      F(gather_c)(src + 2 * first * nc, 1, nc, (size_t)nc, (size_t)nb, r0, i0);
      F(herm_fill)(r0, i0, (size_t)nb, (size_t)n, (size_t)nc, (size_t)nb);
      p = F(exec)(pl, run, (size_t)nb);
      F(scatter_r)(dst + first * n, n, (size_t)n, (size_t)nb, bf[2 * p], scale);
    }
  }
}

/* ------------------------------------------------------ long lines */

/* Multiplies lane b, row k1 by W_n^((n2_0 + b) k1). */
KFN void F(fs_twiddle)(const plan *pl, R *re, R *im, size_t rows, size_t nb, int64_t n2_0) {
  const R *lo = pl->tlo, *hi = pl->thi;
  const int sh = pl->tshift;
  const int64_t mask = ((int64_t)1 << sh) - 1, n = pl->n;
  for (size_t b = 0; b < nb; b++) {
    int64_t step = n2_0 + (int64_t)b, t = 0;
    for (size_t k = 1; k < rows; k++) {
      t += step;
      if (t >= n) t -= n;
      const R *h = hi + 2 * (t >> sh), *l = lo + 2 * (t & mask);
      CMUL(re[k * nb + b], im[k * nb + b], h[0] * l[0] - h[1] * l[1], h[0] * l[1] + h[1] * l[0]);
    }
  }
}

/* X[k1 + n1 k2] = sum_n2 W_n2^(n2 k2) W_n^(n2 k1) sum_n1 W_n1^(n1 k1) x[n2 + n2 n1]:
 * step 1 writes the twiddled column DFTs transposed (out[n2 n1 + k1]), step 2
 * transforms those in place along n2. Lanes are contiguous in both. */
KFN void F(fs_worker)(void *arg, int tid) {
  fs_ctx *c = arg;
  const plan *pl = c->pl;
  const size_t B = (size_t)c->B, rows = (size_t)c->rows;
  const size_t a = LANE_ARRAY(rows, B);
  R *r0 = c->scratch[tid], *i0 = r0 + a, *r1 = i0 + a, *i1 = r1 + a;
  R *bf[4] = {r0, i0, r1, i1}, *sw[4] = {i0, r0, i1, r1};
  R *const *run = c->swap ? sw : bf;
  const int64_t n1 = pl->n1, n2 = pl->n2;
  const ptrdiff_t is = c->is, os = c->os;
  const R *in = c->in;
  R *out = c->out;
  for (;;) {
    int64_t blk = atomic_fetch_add(&c->next, 1);
    if (blk >= c->nblocks) break;
    int64_t first = blk * (int64_t)B, lanes = c->step == 1 ? n2 : n1;
    size_t nb = (size_t)(lanes - first < (int64_t)B ? lanes - first : (int64_t)B);
    int p;
    if (c->step == 1) {
      F(gather_c)(in + 2 * first * is, n2 * is, is, (size_t)n1, nb, r0, i0);
      p = F(exec)(pl->sub, run, nb);
      R *zr = bf[2 * p], *zi = bf[2 * p + 1];
      if (c->swap)
        F(fs_twiddle)(pl, zi, zr, (size_t)n1, nb, first);
      else
        F(fs_twiddle)(pl, zr, zi, (size_t)n1, nb, first);
      F(scatter_c)(out + 2 * first * n1 * os, os, n1 * os, (size_t)n1, nb, zr, zi, 1);
    } else {
      F(gather_c)(out + 2 * first * os, n1 * os, os, (size_t)n2, nb, r0, i0);
      p = F(exec)(pl->sub2, run, nb);
      F(scatter_c)(out + 2 * first * os, n1 * os, os, (size_t)n2, nb, bf[2 * p], bf[2 * p + 1], (R)c->scale);
    }
  }
}

KFN int F(fourstep)(const plan *pl, const R *in, ptrdiff_t is, R *out,
                    ptrdiff_t os, int swap, double scale, int nthreads) {
  fs_ctx c = {pl, in, is, out, os, swap, scale, 1, 64 / sizeof(R), 0, 0, 0, NULL};
  c.rows = pl->sub->rows > pl->sub2->rows ? pl->sub->rows : pl->sub2->rows;
  while (c.B > 2 && 4 * LANE_ARRAY(c.rows, c.B) * sizeof(R) > LANE_BYTES) c.B /= 2;
  int64_t most = (pl->n1 > pl->n2 ? pl->n1 : pl->n2) / c.B + 1;
  if (nthreads > most) nthreads = (int)most;
  if (!(c.scratch = scratch_set(nthreads, 4 * LANE_ARRAY(c.rows, c.B) * sizeof(R)))) return -1;
  for (c.step = 1; c.step <= 2; c.step++) {
    c.nblocks = ((c.step == 1 ? pl->n2 : pl->n1) + c.B - 1) / c.B;
    atomic_store(&c.next, 0);
    parallel(nthreads, F(fs_worker), &c);
  }
  scratch_free(c.scratch, nthreads);
  return 0;
}

KFN int F(line)(const plan *pl, const void *vin, ptrdiff_t is, void *vout,
                ptrdiff_t os, int swap, double scale, int nthreads);

/* Bluestein for one line too long for a lane block. */
KFN int F(bluestein_line)(const plan *pl, const R *in, ptrdiff_t is, R *out,
                          ptrdiff_t os, int swap, double scale, int nthreads) {
  const size_t n = (size_t)pl->n, m = (size_t)pl->m;
  const R *c = pl->chirp, *bh = pl->bhat;
  R *t = malloc(4 * m * sizeof(R)), *u = t + 2 * m;
  if (!t) return -1;
  const int sr = swap ? 1 : 0; /* where the real part lives */
  for (size_t j = 0; j < n; j++) {
    R xr = in[2 * (ptrdiff_t)j * is + sr], xi = in[2 * (ptrdiff_t)j * is + 1 - sr];
    CMUL(xr, xi, c[2 * j], c[2 * j + 1]);
    t[2 * j] = xr, t[2 * j + 1] = xi;
  }
  memset(t + 2 * n, 0, 2 * (m - n) * sizeof(R));
  int rc = F(line)(pl->sub, t, 1, u, 1, 0, 1, nthreads);
  for (size_t k = 0; !rc && k < m; k++) CMUL(u[2 * k], u[2 * k + 1], bh[2 * k], bh[2 * k + 1]);
  if (!rc) rc = F(line)(pl->sub, u, 1, t, 1, 1, 1, nthreads);
  for (size_t k = 0; !rc && k < n; k++) {
    R yr = t[2 * k], yi = t[2 * k + 1];
    CMUL(yr, yi, c[2 * k], c[2 * k + 1]);
    out[2 * (ptrdiff_t)k * os + sr] = yr * (R)scale;
    out[2 * (ptrdiff_t)k * os + 1 - sr] = yi * (R)scale;
  }
  free(t);
  return rc;
}

/* One complex line of any plan: element j at in[2 j is], out[2 j os]. */
KFN int F(line)(const plan *pl, const void *vin, ptrdiff_t is, void *vout,
                ptrdiff_t os, int swap, double scale, int nthreads) {
  const R *in = vin;
  R *out = vout;
  if (pl->split) return F(fourstep)(pl, in, is, out, os, swap, scale, nthreads);
  if (!pl->lanes) return F(bluestein_line)(pl, in, is, out, os, swap, scale, nthreads);
  const size_t rows = (size_t)pl->rows;
  const size_t a = LANE_ARRAY(rows, 1);
  R *s = scratch_alloc(4 * a * sizeof(R));
  if (!s) return -1;
  R *bf[4] = {s, s + a, s + 2 * a, s + 3 * a}, *sw[4] = {bf[1], bf[0], bf[3], bf[2]};
  F(gather_c)(in, is, 1, (size_t)pl->n, 1, bf[0], bf[1]);
  int p = F(exec)(pl, swap ? sw : bf, 1);
  F(scatter_c)(out, os, 1, (size_t)pl->n, 1, bf[2 * p], bf[2 * p + 1], (R)scale);
  free(s);
  return 0;
}

/* Line `line` of a pass whose plan is too long for a lane block. */
KFN int F(big_line)(const axis_job *jb, int64_t line, int nthreads) {
  const plan *pl = jb->pl;
  const int64_t n = jb->n, nc = jb->nc, M = n / 2;
  const R *src = jb->src;
  R *dst = jb->dst;
  if (jb->op == AX_C2C) {
    int64_t S = jb->inner, off = 2 * (line / S * n * S + line % S);
    if (src != dst)
      return F(line)(pl, src + off, S, dst + off, S, jb->swap, jb->scale, nthreads);
    R *t = malloc((size_t)(2 * n) * sizeof(R)); /* four-step is out of place */
    if (!t) return -1;
    for (int64_t j = 0; j < n; j++) t[2 * j] = src[off + 2 * j * S], t[2 * j + 1] = src[off + 2 * j * S + 1];
    int rc = F(line)(pl, t, 1, dst + off, S, jb->swap, jb->scale, nthreads);
    free(t);
    return rc;
  }
  if (jb->op == AX_R2C && n % 2 == 0) {
    R *o = dst + 2 * line * nc;
    if (F(line)(pl, src + line * n, 1, o, 1, 0, 1, nthreads)) return -1;
    F(r2c_post)(o, o + 1, 2, (size_t)M, 1, pl->half);
    return 0;
  }
  size_t len = (size_t)(jb->op == AX_C2R && n % 2 == 0 ? nc : 2 * n);
  R *t = malloc(2 * len * sizeof(R)), *u = t + (len / 2) * 2;
  if (!t) return -1;
  int rc;
  if (jb->op == AX_R2C) { /* odd: a full complex transform */
    for (int64_t j = 0; j < n; j++) t[2 * j] = src[line * n + j], t[2 * j + 1] = 0;
    if (!(rc = F(line)(pl, t, 1, u, 1, 0, 1, nthreads)))
      memcpy(dst + 2 * line * nc, u, (size_t)(2 * nc) * sizeof(R));
  } else if (n % 2 == 0) {
    memcpy(t, src + 2 * line * nc, (size_t)(2 * nc) * sizeof(R));
    F(c2r_pre)(t, t + 1, 2, (size_t)M, 1, pl->half);
    rc = F(line)(pl, t, 1, dst + line * n, 1, 1, jb->scale, nthreads);
  } else {
    memcpy(t, src + 2 * line * nc, (size_t)(2 * nc) * sizeof(R));
    F(herm_fill)(t, t + 1, 2, (size_t)n, (size_t)nc, 1);
    if (!(rc = F(line)(pl, t, 1, u, 1, 1, 1, nthreads)))
      for (int64_t j = 0; j < n; j++) dst[line * n + j] = u[2 * j] * (R)jb->scale;
  }
  free(t);
  return rc;
}

#undef F
#undef KFN
#undef CMUL
#undef TILE_J
#undef tile_gather
#undef tile_scatter
