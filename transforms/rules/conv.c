/* conv.c: the transformation rules of the conv family. The three primitives are the partial
 * derivatives of one bilinear form B(x, w, dy) = <conv(x, w), dy>: conv_bwd_data(dy, w) = dB/dx and
 * conv_bwd_filter(x, dy) = dB/dw. So each is bilinear (JVP: one call per tangent), and each
 * transposes, with respect to either operand, into another member of the set: every derivative of
 * every order is one library call. Batching folds vmap's axis into the batch dimension where only
 * the data operand is batched, else into the feature groups (G -> B * G). Legalize gives the
 * libraries what they take: operands of the result's dtype and symmetric padding per axis (cuDNN's
 * legacy descriptors have one pad per axis), by an explicit pad of the input or a slice of the
 * input gradient. Depends only on ir/ and transforms/. */
#include <string.h>

#include "rules.h"

static int spatial_rank(const kl_eqn *e) { return e->p.conv.window_strides.n; }

/* prim(in0, in1) with e's geometry; spatial_shape from sp (the transposes' other shape), the
 * operands' dtype as the result's. */
static int conv_op(kl_build *a, const kl_eqn *e, kl_prim prim, int in0, int in1, const int64_t *sp) {
  kl_params p = e->p;
  int64_t s[3] = {0, 0, 0};
  int nd = spatial_rank(e);
  if (sp) memcpy(s, sp, sizeof(int64_t) * (size_t)nd);
  p.conv.spatial_shape = (kl_ivec){s, prim == KL_P_CONV ? 0 : nd};
  p.conv.preferred_element_type = -1;
  int ins[2] = {in0, in1};
  return kl_build_op(a, prim, ins, 2, &p);
}

/* ---- JVP: bilinear ---------------------------------------------------------------------------- */

static int conv_jvp(kl_build *a, const kl_eqn *e, const int *xs, const int *ts, int *ys, int *touts) {
  (void)ys;
  int c1 = -1, c2 = -1;
  if (ts[0] >= 0) {
    int ins[2] = {ts[0], xs[1]};
    c1 = same_prim(a, e, ins, 2);
  }
  if (ts[1] >= 0) {
    int ins[2] = {xs[0], ts[1]};
    c2 = same_prim(a, e, ins, 2);
  }
  touts[0] = kl_build_add(a, c1, c2);
  return 0;
}

/* ---- transpose -------------------------------------------------------------------------------- */

/* With c the cotangent of e's result:
 *   conv(x, w):            x: conv_bwd_data(c, w)      w: conv_bwd_filter(x, c)
 *   conv_bwd_data(dy, w):  dy: conv(c, w)              w: conv_bwd_filter(c, dy)
 *   conv_bwd_filter(x, dy): x: conv_bwd_data(dy, c)    dy: conv(x, c)
 * The spatial_shape a gradient needs is the shape of the operand it stands for. The other operand
 * is brought to the cotangent's dtype (wider with preferred_element_type; kl_tr_accumulate
 * converts the result back). */
static int conv_transpose(kl_tctx *c, const kl_eqn *e, int side, int ct) {
  kl_build *a = c->a;
  int nd = spatial_rank(e);
  const kl_aval *in0 = &c->j->vals[e->ins[0]].aval, *in1 = &c->j->vals[e->ins[1]].aval;
  int other = kl_build_convert(a, kl_tr_prim_of(c, e->ins[1 - side]), kl_build_aval(a, ct)->dtype);
  switch (e->prim) {
  case KL_P_CONV:
    return side == 0 ? conv_op(a, e, KL_P_CONV_BWD_DATA, ct, other, in0->dims + 1)
                     : conv_op(a, e, KL_P_CONV_BWD_FILTER, other, ct, in1->dims + 1);
  case KL_P_CONV_BWD_DATA: {
    const int64_t *ksp = in1->dims + 1;
    return side == 0 ? conv_op(a, e, KL_P_CONV, ct, other, NULL) : conv_op(a, e, KL_P_CONV_BWD_FILTER, ct, other, ksp);
  }
  case KL_P_CONV_BWD_FILTER:
    return side == 0 ? conv_op(a, e, KL_P_CONV_BWD_DATA, other, ct, in0->dims + 1) : conv_op(a, e, KL_P_CONV, other, ct, NULL);
  default:
    (void)nd;
    return kl_build_fail(a, KL_ERR_INTERNAL, "conv transpose: not a conv primitive");
  }
}

/* ---- batching --------------------------------------------------------------------------------- */

/* x reshaped to dims (n of them). */
static int reshaped(kl_build *b, int x, const int64_t *dims, int n) { return kl_build_reshape(b, x, dims, n); }

/* Operand 0 always has the batch dimension N (the input, or the output cotangent); operand 1 has
 * it for conv_bwd_filter only, and the result for the other two. vmap's axis B joins N when only
 * operand 0 is batched and the result has N (each example its own images); otherwise every
 * operand is brought to the batch and B joins the feature groups: operands with N go (B, N, S...,
 * ch) -> (N, S..., B * ch), kernels (B, O, K..., I) -> (B * O, K..., I), and the group count is
 * B * G, so example b's channels meet only example b's kernel. */
static int conv_batch(kl_build *b, rule_args *r) {
  const kl_eqn *e = r->e;
  int nd = spatial_rank(e), rank = nd + 2;
  int64_t B = b->size;
  int has_n[2] = {1, e->prim == KL_P_CONV_BWD_FILTER}, out_has_n = e->prim != KL_P_CONV_BWD_FILTER;
  int64_t dims[KL_MAX_RANK + 2];
  if (out_has_n && r->bs[0] && !r->bs[1]) {
    kl_aval xa = kl_batch_aval(b, r->xs[0]);
    dims[0] = B * xa.dims[1];
    memcpy(dims + 1, xa.dims + 2, sizeof(int64_t) * (size_t)(rank - 1));
    int ins[2] = {reshaped(b, r->xs[0], dims, rank), r->xs[1]};
    int y = kl_build_op(b, e->prim, ins, 2, &e->p);
    if (y < 0) return -1;
    kl_aval ya = kl_batch_aval(b, y);
    dims[0] = B;
    dims[1] = ya.dims[0] / (B ? B : 1);
    memcpy(dims + 2, ya.dims + 1, sizeof(int64_t) * (size_t)(rank - 1));
    r->ys[0] = reshaped(b, y, dims, rank + 1);
    return r->ys[0] < 0 ? -1 : 0;
  }
  int ins[2];
  for (int i = 0; i < 2; i++) {
    int x = kl_batch_as_batched(b, r->xs[i], r->bs[i]);
    kl_aval xa = kl_batch_aval(b, x);
    if (has_n[i]) { /* (B, N, S..., ch) -> (N, S..., B, ch) -> (N, S..., B * ch) */
      x = kl_batch_move_axis(b, x, 0, rank - 1);
      memcpy(dims, xa.dims + 1, sizeof(int64_t) * (size_t)rank);
      dims[rank - 1] = B * xa.dims[rank];
    } else { /* (B, O, K..., I) -> (B * O, K..., I) */
      dims[0] = B * xa.dims[1];
      memcpy(dims + 1, xa.dims + 2, sizeof(int64_t) * (size_t)(rank - 1));
    }
    ins[i] = reshaped(b, x, dims, rank);
  }
  kl_params p = e->p;
  p.conv.feature_group_count *= B ? B : 1;
  int y = kl_build_op(b, e->prim, ins, 2, &p);
  if (y < 0) return -1;
  kl_aval ya = kl_batch_aval(b, y);
  if (out_has_n) { /* (N, S'..., B * ch) -> (N, S'..., B, ch) -> (B, N, S'..., ch) */
    memcpy(dims, ya.dims, sizeof(int64_t) * (size_t)rank);
    dims[rank - 1] = B;
    dims[rank] = ya.dims[rank - 1] / (B ? B : 1);
    r->ys[0] = kl_batch_move_axis(b, reshaped(b, y, dims, rank + 1), rank - 1, 0);
  } else { /* (B * O, K..., I) -> (B, O, K..., I) */
    dims[0] = B;
    dims[1] = ya.dims[0] / (B ? B : 1);
    memcpy(dims + 2, ya.dims + 1, sizeof(int64_t) * (size_t)(rank - 1));
    r->ys[0] = reshaped(b, y, dims, rank + 1);
  }
  return r->ys[0] < 0 ? -1 : 0;
}

/* ---- legalize --------------------------------------------------------------------------------- */

/* Operands of the result's dtype, and padding lo == hi on every axis: an axis padded unevenly
 * gets the difference as an explicit pad of the input (conv, conv_bwd_filter), or computes the
 * input gradient over that larger input and slices it back (conv_bwd_data). */
static int conv_legalize(kl_build *b, const kl_eqn *e, const int *xs, int *ys) {
  int nd = spatial_rank(e);
  kl_dtype t = kl_build_aval(b, xs[0])->dtype;
  if (e->p.conv.preferred_element_type >= 0) t = (kl_dtype)e->p.conv.preferred_element_type;
  int uneven = 0;
  for (int i = 0; i < nd; i++) uneven |= e->p.conv.padding_lo.v[i] != e->p.conv.padding_hi.v[i];
  if (!uneven && e->p.conv.preferred_element_type < 0) return 0;
  kl_params p = e->p;
  int64_t lo[3], hi[3], sp[3], extra_lo[3];
  for (int i = 0; i < nd; i++) {
    int64_t l = e->p.conv.padding_lo.v[i], h = e->p.conv.padding_hi.v[i], m = l < h ? l : h;
    lo[i] = hi[i] = m;
    extra_lo[i] = l - m;
    sp[i] = e->p.conv.spatial_shape.n ? e->p.conv.spatial_shape.v[i] + (l - m) + (h - m) : 0;
  }
  p.conv.padding_lo = (kl_ivec){lo, nd};
  p.conv.padding_hi = (kl_ivec){hi, nd};
  p.conv.preferred_element_type = -1;
  int ins[2] = {kl_build_convert(b, xs[0], t), kl_build_convert(b, xs[1], t)};
  if (e->prim != KL_P_CONV_BWD_DATA) { /* the input is operand 0: pad it by the difference */
    int zero = kl_build_lit(b, 0, t);
    for (int i = 0; i < nd; i++) {
      int64_t l = e->p.conv.padding_lo.v[i], h = e->p.conv.padding_hi.v[i];
      if (l != h) ins[0] = kl_ad_pad_axis(b, ins[0], zero, 1 + i, l - lo[i], h - hi[i]);
    }
    ys[0] = kl_build_op(b, e->prim, ins, 2, &p);
    return ys[0] < 0 ? -1 : 1;
  }
  p.conv.spatial_shape = (kl_ivec){sp, nd};
  int y = kl_build_op(b, e->prim, ins, 2, &p);
  for (int i = 0; i < nd; i++)
    if (sp[i] != e->p.conv.spatial_shape.v[i]) y = kl_ad_slice_axis(b, y, 1 + i, extra_lo[i], extra_lo[i] + e->p.conv.spatial_shape.v[i]);
  ys[0] = y;
  return y < 0 ? -1 : 1;
}

const kl_rule_row kl_rules_conv[] = {
    {KL_P_CONV, conv_jvp, conv_transpose, conv_batch, NULL, NULL, conv_legalize},
    {KL_P_CONV_BWD_DATA, conv_jvp, conv_transpose, conv_batch, NULL, NULL, conv_legalize},
    {KL_P_CONV_BWD_FILTER, conv_jvp, conv_transpose, conv_batch, NULL, NULL, conv_legalize},
    KL_RULES_END};
