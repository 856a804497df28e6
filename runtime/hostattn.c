/* hostattn.c: fused dot-product attention on host memory (see hostattn.h). Each query row's
 * logits live in one row buffer of s doubles; operands are read through float64 copies. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/status.h"
#include "hostattn.h"
#include "hostla.h"

/* n elements of type t at src as doubles; NULL when out of memory or t is not a float. */
static double *to_f64(kl_dtype t, const void *src, int64_t n) {
  double *d = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!d) return NULL;
  if (t == KL_F64) memcpy(d, src, sizeof(double) * (size_t)n);
  else if (t == KL_F32)
    for (int64_t i = 0; i < n; i++) d[i] = ((const float *)src)[i];
  else if (t == KL_F16 || t == KL_BF16) {
    float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!f) {
      free(d);
      return NULL;
    }
    kl_hostla_half_to_f32(t, src, f, n);
    for (int64_t i = 0; i < n; i++) d[i] = f[i];
    free(f);
  } else {
    free(d);
    return NULL;
  }
  return d;
}

/* n doubles into dst as type t (rounded to nearest); 0, or -1 out of memory. */
static int from_f64(kl_dtype t, const double *src, void *dst, int64_t n) {
  if (t == KL_F64) memcpy(dst, src, sizeof(double) * (size_t)n);
  else if (t == KL_F32)
    for (int64_t i = 0; i < n; i++) ((float *)dst)[i] = (float)src[i];
  else {
    float *f = malloc(sizeof(float) * (size_t)(n ? n : 1));
    if (!f) return -1;
    for (int64_t i = 0; i < n; i++) f[i] = (float)src[i];
    kl_hostla_f32_to_half(t, f, dst, n);
    free(f);
  }
  return 0;
}

static int fail_nomem(const char *who, char *err, size_t errlen) {
  return kl_error(err, errlen, KL_ERR_NOMEM, "%s: out of memory for its float64 working copies", who);
}

static inline const double *row(const double *x, const kl_attn_geom *g, int64_t len, int64_t heads, int64_t b,
                                 int64_t i, int64_t n) {
  return x + ((b * len + i) * heads + n) * g->h;
}

/* The masked, scaled logits of query (b, i, n) into l[0..s); returns the last key it sees + 1. */
static int64_t logits(const kl_attn_geom *g, const double *q, const double *k, int64_t b, int64_t i, int64_t n,
                      double *l) {
  int64_t kvh = n / (g->n / g->kv), end = g->causal ? (i + 1 < g->s ? i + 1 : g->s) : g->s;
  const double *qr = row(q, g, g->t, g->n, b, i, n);
  for (int64_t j = 0; j < end; j++) {
    const double *kr = row(k, g, g->s, g->kv, b, j, kvh);
    double acc = 0;
    for (int64_t h = 0; h < g->h; h++) acc += qr[h] * kr[h];
    l[j] = g->scale * acc;
  }
  return end;
}

int kl_host_attention(kl_dtype t, const kl_attn_geom *g, const void *q, const void *k, const void *v, void *o,
                      float *lse, char *err, size_t errlen) {
  const char *who = "dot_product_attention";
  int64_t nq = g->b * g->t * g->n * g->h, nk = g->b * g->s * g->kv * g->h;
  double *dq = to_f64(t, q, nq), *dk = to_f64(t, k, nk), *dv = to_f64(t, v, nk);
  double *out = calloc((size_t)(nq ? nq : 1), sizeof(double)), *l = malloc(sizeof(double) * (size_t)(g->s + 1));
  int rc = 0;
  if (!dq || !dk || !dv || !out || !l) rc = fail_nomem(who, err, errlen);
  for (int64_t b = 0; !rc && b < g->b; b++)
    for (int64_t i = 0; i < g->t; i++)
      for (int64_t n = 0; n < g->n; n++) {
        int64_t end = logits(g, dq, dk, b, i, n, l), kvh = n / (g->n / g->kv);
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j < end; j++) m = l[j] > m ? l[j] : m;
        double *orow = out + ((b * g->t + i) * g->n + n) * g->h;
        for (int64_t j = 0; j < end; j++) {
          double p = exp(l[j] - m);
          sum += p;
          const double *vr = row(dv, g, g->s, g->kv, b, j, kvh);
          for (int64_t h = 0; h < g->h; h++) orow[h] += p * vr[h];
        }
        for (int64_t h = 0; end && h < g->h; h++) orow[h] /= sum;
        lse[(b * g->n + n) * g->t + i] = end ? (float)(m + log(sum)) : -INFINITY;
      }
  if (!rc && from_f64(t, out, o, nq)) rc = fail_nomem(who, err, errlen);
  free(dq), free(dk), free(dv), free(out), free(l);
  return rc;
}

int kl_host_attention_bwd(kl_dtype t, const kl_attn_geom *g, const void *q, const void *k, const void *v,
                          const void *o, const void *do_, const float *lse, void *dq, void *dk, void *dv, char *err,
                          size_t errlen) {
  const char *who = "dot_product_attention_bwd";
  int64_t nq = g->b * g->t * g->n * g->h, nk = g->b * g->s * g->kv * g->h;
  double *fq = to_f64(t, q, nq), *fk = to_f64(t, k, nk), *fv = to_f64(t, v, nk), *fo = to_f64(t, o, nq),
         *fdo = to_f64(t, do_, nq);
  double *gq = calloc((size_t)(nq ? nq : 1), sizeof(double)), *gk = calloc((size_t)(nk ? nk : 1), sizeof(double)),
         *gv = calloc((size_t)(nk ? nk : 1), sizeof(double)), *l = malloc(sizeof(double) * (size_t)(g->s + 1));
  int rc = 0;
  if (!fq || !fk || !fv || !fo || !fdo || !gq || !gk || !gv || !l) rc = fail_nomem(who, err, errlen);
  for (int64_t b = 0; !rc && b < g->b; b++)
    for (int64_t i = 0; i < g->t; i++)
      for (int64_t n = 0; n < g->n; n++) {
        int64_t end = logits(g, fq, fk, b, i, n, l), kvh = n / (g->n / g->kv);
        double m = lse[(b * g->n + n) * g->t + i];
        const double *dorow = row(fdo, g, g->t, g->n, b, i, n), *orow = row(fo, g, g->t, g->n, b, i, n),
                     *qr = row(fq, g, g->t, g->n, b, i, n);
        double *gqr = gq + ((b * g->t + i) * g->n + n) * g->h, dsum = 0;
        for (int64_t h = 0; h < g->h; h++) dsum += dorow[h] * orow[h];
        for (int64_t j = 0; j < end; j++) {
          double p = exp(l[j] - m), dp = 0;
          const double *vr = row(fv, g, g->s, g->kv, b, j, kvh), *kr = row(fk, g, g->s, g->kv, b, j, kvh);
          double *gkr = gk + ((b * g->s + j) * g->kv + kvh) * g->h, *gvr = gv + ((b * g->s + j) * g->kv + kvh) * g->h;
          for (int64_t h = 0; h < g->h; h++) dp += dorow[h] * vr[h];
          double ds = p * (dp - dsum) * g->scale;
          for (int64_t h = 0; h < g->h; h++) {
            gqr[h] += ds * kr[h];
            gkr[h] += ds * qr[h];
            gvr[h] += p * dorow[h];
          }
        }
      }
  if (!rc && (from_f64(t, gq, dq, nq) || from_f64(t, gk, dk, nk) || from_f64(t, gv, dv, nk)))
    rc = fail_nomem(who, err, errlen);
  free(fq), free(fk), free(fv), free(fo), free(fdo), free(gq), free(gk), free(gv), free(l);
  return rc;
}
