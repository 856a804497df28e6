/* kernel_gpu.c: a fused kernel (a KERNEL step of a plan) as an MLIR gpu.func. The values are
 * computed by kernel.c's element emitter; this file maps the iteration space onto threads:
 *   elementwise:  one element per thread, grid-stride over the flattened output;
 *   row:          one block per row (softmax, layernorm, sums over trailing axes): threads
 *                 stride across the row, partial results meet in a shared-memory tree;
 *   column:       one thread per output element looping over the reduced axes;
 *   full:         every block reduces a slice into a partial, a second kernel reduces those.
 * Library steps with kernels of their own are written by their families (the row's gpu_kernel).
 * Depends on ir/, transforms/fuse.h, kernel_internal.h and the lowering rows (lower/lower.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/alloc.h"
#include "lower/lower.h"

#define KL_ROW_REG_ELEMS 16 /* most elements of a row one thread keeps in registers */
#define GK_BLOCK 256 /* threads per block for elementwise, full and long-row kernels */

/* Type a reduction accumulates in, in registers, shared memory and partial buffers (booleans
 * travel as i32). */
static const char *shared_type(kl_dtype t) { return t == KL_BOOL ? "i32" : kl_compute_type(t); }

/* Emits `out = acc (op) v` for reduction p in type ty (a compute or shared type; booleans in
 * i32 combine by their bool op). Float max/min propagate NaN (as JAX does) with compares and
 * selects, which every GPU and type supports. */
char *kg_combine(kctx *k, kl_prim p, kl_dtype t, const char *ty, const char *acc, const char *v, char *out) {
  const kl_reduce_rule *r = kl_lower_get(p)->reduce;
  if (kl_dtype_is_float(t) && r->nan_cmp) {
    ssa c, s, u;
    kk_line(k, "%s = arith.cmpf %s, %s, %s : %s", kk_fresh(k, c), r->nan_cmp, v, acc, ty);
    kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, s), c, v, acc, ty);
    kk_line(k, "%s = arith.cmpf uno, %s, %s : %s", kk_fresh(k, u), acc, acc, ty);
    kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, out), u, acc, s, ty);
    return out;
  }
  kk_line(k, "%s = arith.%s %s, %s : %s", kk_fresh(k, out), kk_reduce_op(p, t), acc, v, ty);
  return out;
}

/* The reduction's start value in the shared type. */
static char *shared_init(kctx *k, kl_prim p, kl_dtype t, char *out) {
  if (t != KL_BOOL) {
    kk_reduce_init(k, p, t, out);
    return out;
  }
  kk_line(k, "%s = arith.constant %d : i32", kk_fresh(k, out), kl_lower_get(p)->reduce->binit);
  return out;
}

static void to_shared(kctx *k, kl_dtype t, char *v) {
  if (t != KL_BOOL) return;
  ssa w;
  kk_line(k, "%s = arith.extui %s : i1 to i32", kk_fresh(k, w), v);
  snprintf(v, sizeof(ssa), "%s", w);
}

static void from_shared(kctx *k, kl_dtype t, char *v) {
  if (t != KL_BOOL) return;
  ssa z, w;
  kk_line(k, "%s = arith.constant 0 : i32", kk_fresh(k, z));
  kk_line(k, "%s = arith.cmpi ne, %s, %s : i32", kk_fresh(k, w), v, z);
  snprintf(v, sizeof(ssa), "%s", w);
}

/* Butterfly over the lanes of each warp (xor offsets `from`, from/2, ..., 1): every lane ends
 * with the combination of its group of 2*from lanes. ty is 32 bits wide. */
static void warp_reduce(kctx *k, kl_prim p, kl_dtype t, const char *ty, const char *v, int from, char *out) {
  ssa cur, w;
  snprintf(cur, sizeof cur, "%s", v);
  kk_line(k, "%s = arith.constant 32 : i32", kk_fresh(k, w));
  for (int off = from; off >= 1; off /= 2) {
    ssa o, sh, ok, nx;
    kk_line(k, "%s = arith.constant %d : i32", kk_fresh(k, o), off);
    kk_fresh(k, sh);
    kk_fresh(k, ok);
    kk_line(k, "%s, %s = gpu.shuffle xor %s, %s, %s : %s", sh, ok, cur, o, w, ty);
    kg_combine(k, p, t, ty, cur, sh, nx);
    snprintf(cur, sizeof cur, "%s", nx);
  }
  snprintf(out, sizeof(ssa), "%s", cur);
}

/* Block-wide reduction of v (shared type) through workgroup buffer %sh<slot>; every thread gets
 * the result in out, and control flow stays uniform. 32-bit types reduce within each warp by
 * shuffles, then across the warps' partials (one barrier); other types use a shared-memory tree
 * with a barrier per level. */
static void block_reduce(kctx *k, kl_prim p, kl_dtype t, int slot, int block, const char *v, char *out) {
  const char *ty = shared_type(t);
  if (block >= 32 && (!strcmp(ty, "f32") || !strcmp(ty, "i32"))) {
    int nw = block / 32;
    ssa w;
    warp_reduce(k, p, t, ty, v, 16, w);
    if (nw == 1) {
      snprintf(out, sizeof(ssa), "%s", w);
      kk_line(k, "gpu.barrier"); /* as the tree path: the caller may reuse memory the block shares */
      return;
    }
    ssa c32, lane, wid, first;
    kk_const_index(k, 32, c32);
    kk_line(k, "%s = arith.remui %%tid, %s : index", kk_fresh(k, lane), c32);
    kk_line(k, "%s = arith.divui %%tid, %s : index", kk_fresh(k, wid), c32);
    kk_line(k, "%s = arith.cmpi eq, %s, %%c0 : index", kk_fresh(k, first), lane);
    kk_line(k, "scf.if %s {", first);
    kk_line(k, "  memref.store %s, %%sh%d[%s] : memref<%dx%s, #gpu.address_space<workgroup>>", w, slot, wid, block, ty);
    kk_line(k, "}");
    kk_line(k, "gpu.barrier");
    /* lane l of every warp takes partial l mod nw: a butterfly over groups of nw lanes then gives
     * every thread the total, without a broadcast */
    ssa mask, li, x;
    kk_const_index(k, nw - 1, mask);
    kk_line(k, "%s = arith.andi %s, %s : index", kk_fresh(k, li), lane, mask);
    kk_line(k, "%s = memref.load %%sh%d[%s] : memref<%dx%s, #gpu.address_space<workgroup>>", kk_fresh(k, x), slot, li, block,
            ty);
    warp_reduce(k, p, t, ty, x, nw / 2, out);
    kk_line(k, "gpu.barrier"); /* the buffer is reused by the next row */
    return;
  }
  kk_line(k, "memref.store %s, %%sh%d[%%tid] : memref<%dx%s, #gpu.address_space<workgroup>>", v, slot, block, ty);
  kk_line(k, "gpu.barrier");
  for (int s = block / 2; s >= 1; s /= 2) {
    ssa cs, pr, o, x, y, z;
    kk_const_index(k, s, cs);
    kk_line(k, "%s = arith.cmpi ult, %%tid, %s : index", kk_fresh(k, pr), cs);
    kk_line(k, "scf.if %s {", pr);
    const char *ind = k->ind;
    char ind2[80];
    snprintf(ind2, sizeof ind2, "%s  ", ind);
    k->ind = ind2;
    kk_line(k, "%s = arith.addi %%tid, %s : index", kk_fresh(k, o), cs);
    kk_line(k, "%s = memref.load %%sh%d[%%tid] : memref<%dx%s, #gpu.address_space<workgroup>>", kk_fresh(k, x), slot, block, ty);
    kk_line(k, "%s = memref.load %%sh%d[%s] : memref<%dx%s, #gpu.address_space<workgroup>>", kk_fresh(k, y), slot, o, block, ty);
    kg_combine(k, p, t, ty, x, y, z);
    kk_line(k, "memref.store %s, %%sh%d[%%tid] : memref<%dx%s, #gpu.address_space<workgroup>>", z, slot, block, ty);
    k->ind = ind;
    kk_line(k, "}");
    kk_line(k, "gpu.barrier");
  }
  kk_line(k, "%s = memref.load %%sh%d[%%c0] : memref<%dx%s, #gpu.address_space<workgroup>>", kk_fresh(k, out), slot, block, ty);
  kk_line(k, "gpu.barrier"); /* the buffer is reused by the next row */
}

/* Accumulates value `v` of the space `dims` (rank n) over the linear range
 * [start, total) step `step`, with idx[0..lead) fixed and idx[lead..n) from the linear index.
 * With vec > 1 the loop runs over groups of vec consecutive elements (total % vec == 0).
 * Leaves this thread's partial (shared type) in out. */
static void strided_accumulate(kctx *k, kl_prim p, kl_dtype t, int v, const int64_t *dims, int n, int lead, ssa *idx,
                               const char *start, int64_t total, const char *step, int sid, int vec, char *out) {
  const char *ty = shared_type(t);
  ssa init, tot;
  shared_init(k, p, t, init);
  kk_const_index(k, total / vec, tot);
  kk_line(k, "%%acc%d = scf.for %%j%d = %s to %s step %s iter_args(%%ra%d = %s) -> (%s) {", sid, sid, start, tot, step, sid,
          init, ty);
  const char *ind = k->ind;
  char ind2[80];
  snprintf(ind2, sizeof ind2, "%s  ", ind);
  k->ind = ind2;
  int mark = kk_memo_mark(k);
  ssa acc;
  snprintf(acc, sizeof acc, "%%ra%d", sid);
  for (int q = 0; q < vec; q++) {
    char jn[24];
    snprintf(jn, sizeof jn, "%%j%d", sid);
    if (vec > 1) {
      ssa cv, b, cq;
      kk_const_index(k, vec, cv);
      kk_line(k, "%s = arith.muli %s, %s : index", kk_fresh(k, b), jn, cv);
      kk_const_index(k, q, cq);
      kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, jn), b, cq);
    }
    kk_delinearize(k, jn, dims + lead, n - lead, idx + lead);
    ssa val, c;
    kk_emit_value(k, v, idx, val);
    if (k->stash == v && k->stash >= 0) kk_store_stash(k, val, idx, n); /* the output loop reads them back */
    to_shared(k, t, val);
    kg_combine(k, p, t, ty, acc, val, c);
    snprintf(acc, sizeof acc, "%s", c);
  }
  kk_line(k, "scf.yield %s : %s", acc, ty);
  kk_memo_reset(k, mark);
  k->ind = ind;
  kk_line(k, "}");
  snprintf(out, sizeof(ssa), "%%acc%d", sid);
}

/* Column reductions: accumulates reduction e's operand over its reduced axes (sizes rdims, at
 * positions rpos of idx; the kept entries of idx are set), walking their flattened index from
 * `start` in steps of `step`. Leaves this thread's partial (shared type) in out. */
static void reduced_accumulate(kctx *k, const kl_eqn *e, kl_dtype rt, const int64_t *rdims, int nr, const int *rpos,
                               ssa *idx, const char *start, int64_t step, char *out) {
  const char *ty = shared_type(rt);
  ssa init, rtot, cs, ridx[KL_MAX_RANK];
  shared_init(k, e->prim, rt, init);
  int64_t total = 1;
  for (int i = 0; i < nr; i++) total *= rdims[i];
  kk_const_index(k, total, rtot);
  if (step == 1) snprintf(cs, sizeof cs, "%%c1");
  else kk_const_index(k, step, cs);
  kk_line(k, "%%acc0 = scf.for %%j0 = %s to %s step %s iter_args(%%ra0 = %s) -> (%s) {", start, rtot, cs, init, ty);
  const char *ind = k->ind;
  char ind2[80];
  snprintf(ind2, sizeof ind2, "%s  ", ind);
  k->ind = ind2;
  int mark = kk_memo_mark(k);
  kk_delinearize(k, "%j0", rdims, nr, ridx);
  for (int i = 0; i < nr; i++) memcpy(idx[rpos[i]], ridx[i], sizeof(ssa));
  ssa val, c;
  kk_emit_value(k, e->ins[0], idx, val);
  to_shared(k, rt, val);
  kg_combine(k, e->prim, rt, ty, "%ra0", val, c);
  kk_line(k, "scf.yield %s : %s", c, ty);
  kk_memo_reset(k, mark);
  k->ind = ind;
  kk_line(k, "}");
  snprintf(out, sizeof(ssa), "%%acc0");
}

/* Converts a reduction result (shared type) to the output's storage type and stores it. */
static void store_result(kctx *k, kl_dtype t, const char *v, int out_arg, const kl_aval *oa, ssa *idx, int n) {
  ssa r;
  snprintf(r, sizeof r, "%s", v);
  from_shared(k, t, r);
  kk_store_value(k, t, r, out_arg, oa, idx, n);
}

int kl_gpu_partial_size(kl_dtype t) { return t == KL_BOOL || kk_is_low_float(t) ? 4 : (int)kl_dtype_size(t); }

static void arg_of(kg_arg *a, const kl_aval *v, int readonly) {
  a->ndim = v->ndim;
  memcpy(a->dims, v->dims, sizeof(int64_t) * (size_t)v->ndim);
  a->storage = kl_storage_type(v->dtype);
  a->readonly = readonly;
}

/* gpu.func header: memref<1xT> bare-pointer arguments reinterpreted with their static shapes as
 * %m<i>, workgroup buffers %sh<i>, thread and block ids. */
static int shared_elems; /* elements of each workgroup array of the kernel being written; 0: block */

static void emit_header(kl_str *out, const char *name, const kg_arg *args, int nargs, const char **shared, int nshared,
                        int block) {
  kl_str_printf(out, "    gpu.func @%s(", name);
  for (int i = 0; i < nargs; i++)
    kl_str_printf(out, "%s%%a%d: memref<1x%s> {llvm.noalias%s}", i ? ", " : "", i, args[i].storage,
                  args[i].readonly ? ", llvm.readonly" : "");
  kl_str_append(out, ")");
  if (nshared) {
    kl_str_append(out, " workgroup(");
    for (int i = 0; i < nshared; i++)
      kl_str_printf(out, "%s%%sh%d: memref<%dx%s, #gpu.address_space<workgroup>>", i ? ", " : "", i,
                    shared_elems ? shared_elems : block, shared[i]);
    kl_str_append(out, ")");
  }
  kl_str_printf(out, " kernel attributes {known_block_size = array<i32: %d, 1, 1>} {\n", block);
  kl_str_append(out, "      %c0 = arith.constant 0 : index\n      %c1 = arith.constant 1 : index\n");
  for (int i = 0; i < nargs; i++) {
    const kg_arg *a = &args[i];
    kk_emit_reinterpret(out, "      ", i, a->ndim, a->dims, a->storage);
    /* kiln's device buffers are 256-byte aligned (cuMemAllocAsync); foreign ones are copied
     * unless 16-byte aligned */
    kl_str_printf(out, "      memref.assume_alignment %%m%d, 16 : memref<", i);
    if (a->ndim == 0) kl_str_append(out, "1x");
    for (int d = 0; d < a->ndim; d++) kl_str_printf(out, "%lldx", (long long)a->dims[d]);
    kl_str_printf(out, "%s>\n", a->storage);
  }
  kl_str_printf(out, "      %%tid = gpu.thread_id x\n      %%bid = gpu.block_id x\n      %%nblk = gpu.grid_dim x\n"
                     "      %%bdim = arith.constant %d : index\n",
                block);
}


/* ---- transposed reads through shared memory ----
 * An elementwise kernel whose expression reads a buffer X through a transpose that moves X's
 * last axis (a.T + a) reads X with a stride: every thread of a warp touches another row. Such a
 * kernel runs over 32x32 tiles of the output's two axes involved: the block first reads the tile
 * of X along X's rows (coalesced) into shared memory, then computes the tile's outputs along the
 * output's rows, taking X's elements from shared memory. */

/* The transpose value read in place by root's elementwise expression (the first found) whose
 * operand is a buffer of a 4-byte or 8-byte type and whose permutation moves the last axis; -1
 * when there is none or the output is small. */
static int find_transpose(const kl_plan *plan, int v, const kl_aval *oa, int depth, unsigned char *seen) {
  const kl_program *pg = plan->pg;
  const kl_value *val = &pg->vals[v];
  if (val->producer < 0 || depth > 64 || val->aval.ndim != oa->ndim || seen[v]) return -1;
  seen[v] = 1; /* each value once: a DAG of shared subexpressions (threefry's rounds) is not a tree */
  for (int i = 0; i < oa->ndim; i++)
    if (val->aval.dims[i] != oa->dims[i]) return -1;
  const kl_eqn *e = &pg->eqns[val->producer];
  if (e->prim == KL_P_TRANSPOSE) {
    int x = e->ins[0], n = oa->ndim;
    size_t es = kl_dtype_size(pg->vals[x].aval.dtype);
    if (plan->materialized[x] && e->p.transpose.permutation.v[n - 1] != n - 1 && (es == 4 || es == 8) &&
        pg->vals[x].aval.dtype != KL_BOOL)
      return v;
    return -1;
  }
  if (!kl_form_elementwise(kl_prim_get(e->prim)->form)) return -1;
  for (int i = 0; i < e->nin; i++) {
    int in = e->ins[i];
    if (pg->vals[in].aval.ndim == 0 || plan->materialized[in]) continue; /* a plain buffer read */
    int t = find_transpose(plan, in, oa, depth + 1, seen);
    if (t >= 0) return t;
  }
  return -1;
}

static int transposed_read(const kl_plan *plan, int root) {
  const kl_aval *oa = &plan->pg->vals[root].aval;
  const char *env = getenv("KILN_GPU_TILED_TRANSPOSE"); /* 0: off */
  if (oa->ndim < 2 || kl_aval_size(oa) < (1 << 16) || (env && *env == '0')) return -1;
  unsigned char *seen = calloc((size_t)plan->pg->nvals, 1);
  if (!seen) return -1; /* the plain read is always correct */
  int t = find_transpose(plan, root, oa, 0, seen);
  free(seen);
  return t;
}

static void emit_tiled(kctx *k, const kl_plan *plan, int root, int tv, kl_gpu_kernel_info *info) {
  const kl_program *pg = plan->pg;
  const kl_aval *oa = &pg->vals[root].aval;
  const kl_eqn *te = &pg->eqns[pg->vals[tv].producer];
  int x = te->ins[0], n = oa->ndim, r = -1;
  const int64_t *perm = te->p.transpose.permutation.v;
  for (int i = 0; i < n; i++)
    if (perm[i] == n - 1) r = i; /* the output axis along X's rows */
  const char *sty = kl_storage_type(pg->vals[x].aval.dtype);
  int64_t tr_n = (oa->dims[r] + 31) / 32, tc_n = (oa->dims[n - 1] + 31) / 32;
  int64_t tdims[KL_MAX_RANK + 2];
  int no = 0, opos[KL_MAX_RANK];
  for (int i = 0; i < n; i++)
    if (i != r && i != n - 1) tdims[no] = oa->dims[i], opos[no++] = i;
  int64_t ntiles = tr_n * tc_n;
  for (int i = 0; i < no; i++) ntiles *= tdims[i];
  tdims[no] = tr_n;
  tdims[no + 1] = tc_n;
  ssa c32, c33, tx, ty, nt, tcoord[KL_MAX_RANK + 2], r0, c0;
  kk_const_index(k, 32, c32);
  kk_const_index(k, 33, c33);
  kk_line(k, "%s = arith.remui %%tid, %s : index", kk_fresh(k, tx), c32);
  kk_line(k, "%s = arith.divui %%tid, %s : index", kk_fresh(k, ty), c32);
  kk_const_index(k, ntiles, nt);
  kk_line(k, "scf.for %%tile = %%bid to %s step %%nblk {", nt);
  k->ind = "        ";
  kk_delinearize(k, "%tile", tdims, no + 2, tcoord);
  kk_line(k, "%s = arith.muli %s, %s : index", kk_fresh(k, r0), tcoord[no], c32);
  kk_line(k, "%s = arith.muli %s, %s : index", kk_fresh(k, c0), tcoord[no + 1], c32);
  ssa rmax, cmax;
  kk_const_index(k, oa->dims[r] - 1, rmax);
  kk_const_index(k, oa->dims[n - 1] - 1, cmax);
  for (int pass = 0; pass < 2; pass++) {
    for (int j = 0; j < 4; j++) {
      /* pass 0: thread (tx, ty) reads X at output coordinates (r: r0 + tx, last: c0 + ty + 8j);
       * pass 1: it computes the output at (r: r0 + ty + 8j, last: c0 + tx) */
      ssa a, b, cj, ar, bc, arc, bcc, idx[KL_MAX_RANK], sh, v;
      kk_const_index(k, 8 * j, cj);
      kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, a), pass ? ty : tx, pass ? cj : "%c0");
      kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, b), pass ? tx : ty, pass ? "%c0" : cj);
      kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, ar), r0, a);
      kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, bc), c0, b);
      kk_line(k, "%s = arith.minui %s, %s : index", kk_fresh(k, arc), ar, rmax); /* clamped: every read is valid */
      kk_line(k, "%s = arith.minui %s, %s : index", kk_fresh(k, bcc), bc, cmax);
      for (int i = 0; i < no; i++) memcpy(idx[opos[i]], tcoord[i], sizeof(ssa));
      memcpy(idx[r], arc, sizeof(ssa));
      memcpy(idx[n - 1], bcc, sizeof(ssa));
      if (pass == 0) { /* sh[(ty + 8j) * 33 + tx] = X at the transpose's source of idx */
        ssa xidx[KL_MAX_RANK], row, pos;
        for (int i = 0; i < n; i++) memcpy(xidx[perm[i]], idx[i], sizeof(ssa));
        kk_emit_load(k, x, xidx, v);
        kk_line(k, "%s = arith.muli %s, %s : index", kk_fresh(k, row), b, c33);
        kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, pos), row, a);
        kk_line(k, "memref.store %s, %%sh0[%s] : memref<%dx%s, #gpu.address_space<workgroup>>", v, pos, 32 * 33, sty);
        continue;
      }
      /* the transpose's value at idx is X at (q: c0 + tx, last: r0 + ty + 8j): sh[tx * 33 + ty + 8j] */
      ssa row, pos, val, ok1, ok2, ok, rl, cl;
      kk_line(k, "%s = arith.muli %s, %s : index", kk_fresh(k, row), tx, c33);
      kk_line(k, "%s = arith.addi %s, %s : index", kk_fresh(k, pos), row, a);
      kk_line(k, "%s = memref.load %%sh0[%s] : memref<%dx%s, #gpu.address_space<workgroup>>", kk_fresh(k, sh), pos,
              32 * 33, sty);
      kk_memo_set(k, tv, idx, sh); /* 4- and 8-byte types compute as they are stored */
      kk_emit_value(k, root, idx, val);
      kk_const_index(k, oa->dims[r], rl);
      kk_const_index(k, oa->dims[n - 1], cl);
      kk_line(k, "%s = arith.cmpi ult, %s, %s : index", kk_fresh(k, ok1), ar, rl);
      kk_line(k, "%s = arith.cmpi ult, %s, %s : index", kk_fresh(k, ok2), bc, cl);
      kk_line(k, "%s = arith.andi %s, %s : i1", kk_fresh(k, ok), ok1, ok2);
      kk_line(k, "scf.if %s {", ok);
      k->ind = "          ";
      kk_store_value(k, oa->dtype, val, kk_arg_index(k, root), oa, idx, n);
      k->ind = "        ";
      kk_line(k, "}");
    }
    kk_line(k, "gpu.barrier");
  }
  k->ind = "      ";
  kk_line(k, "}");
  info->grid = (unsigned)(ntiles < 65536 ? ntiles : 65536);
}

static int64_t prod(const int64_t *d, int a, int b) {
  int64_t p = 1;
  for (int i = a; i < b; i++) p *= d[i];
  return p;
}

static int pow2_at_least(int64_t n, int lo, int hi) {
  int b = lo;
  while (b < hi && b < n) b *= 2;
  return b;
}

static unsigned grid_for(int64_t work, int block) {
  int64_t g = (work + block - 1) / block;
  if (g < 1) g = 1;
  if (g > (1 << 20)) g = 1 << 20; /* grid-stride loops cover the rest */
  return (unsigned)g;
}

/* The longest rows of 8-byte values a reduction hands one thread each when there are many rows
 * (an argmax's packed words over a categorical draw's classes): 128, KILN_GPU_THREAD_ROWS=N to
 * experiment (0: never). */
static int64_t thread_rows(void) {
  static int64_t most = -1;
  if (most < 0) {
    const char *ev = getenv("KILN_GPU_THREAD_ROWS");
    most = ev && *ev ? atoll(ev) : 128;
  }
  return most;
}

/* Row kernels whose rows are short enough keep them in registers: each thread holds the
 * elements tid, tid + block, ... of its row, computed once (the element memo is shared by the
 * stages and the output, all in one straight-line body), so every operand is read from memory
 * once per row and the stages cost only their block reductions. Needs every stage to reduce
 * over rows of the output's row shape. Returns the block size, or 0 for the general row kernel.
 * Blocks of up to 512 threads, 8 elements each (16 for rows longer than 4,096): measured on an
 * H100, softmax over rows of 8,192 took 192 us with blocks of 512 and 245 us with 1,024.
 * KILN_GPU_ROW_REGS=0 turns it off; KILN_GPU_ROW_REGS=E asks for E elements per thread and
 * KILN_GPU_ROW_REGS_BLOCK=B for blocks of at most B threads. */
static int register_row(const kl_program *pg, const kl_plan_step *st, const kl_aval *oa, int rowk, int64_t row_len) {
  static int per = -1, most = 512;
  if (per < 0) {
    const char *ev = getenv("KILN_GPU_ROW_REGS"), *eb = getenv("KILN_GPU_ROW_REGS_BLOCK");
    per = ev && *ev ? atoi(ev) : 8;
    if (per < 0) per = 0;
    if (per > KL_ROW_REG_ELEMS) per = KL_ROW_REG_ELEMS;
    if (eb && atoi(eb) >= 32 && atoi(eb) <= 1024) most = atoi(eb);
  }
  if (!per || row_len < 32) return 0;
  for (int j = 0; j < st->nstages; j++) {
    const kl_aval *x = &pg->vals[pg->eqns[st->stages[j]].ins[0]].aval;
    if (x->ndim != oa->ndim || memcmp(x->dims + rowk, oa->dims + rowk, sizeof(int64_t) * (size_t)(oa->ndim - rowk)))
      return 0;
  }
  int block = pow2_at_least((row_len + per - 1) / per, 32, most); /* long rows: more per thread */
  return (row_len + block - 1) / block <= KL_ROW_REG_ELEMS ? block : 0;
}

/* The buffers a row kernel reads: materialized leaves of its output's expression (through its
 * stages, which it computes), into set. */
static void row_leaves(const kctx *k, int v, char *seen, char *set) {
  if (seen[v]) return;
  seen[v] = 1;
  const kl_value *val = &k->pg->vals[v];
  if ((k->plan->materialized[v] && v != k->root) || val->producer < 0) {
    set[v] = 1;
    return;
  }
  const kl_eqn *e = &k->pg->eqns[val->producer];
  for (int i = 0; i < e->nin; i++) row_leaves(k, e->ins[i], seen, set);
}

/* Whether value v (buffer m's expression, v == m at the top) can be computed from what the row
 * kernel reads anyway (set) and its stages, in at most *budget operations of elementwise,
 * broadcast, reshape, iota or constant form. */
static int row_cheap(const kctx *k, const kl_plan_step *st, int v, int m, const char *set, int *budget) {
  if (v != m && k->plan->materialized[v]) return set[v];
  for (int j = 0; j < st->nstages; j++)
    if (k->pg->eqns[st->stages[j]].outs[0] == v) return 1;
  const kl_value *val = &k->pg->vals[v];
  if (val->producer < 0 || --*budget < 0) return 0;
  const kl_eqn *e = &k->pg->eqns[val->producer];
  kl_form f = kl_prim_get(e->prim)->form;
  if (!kl_form_elementwise(f) && f != KL_FORM_CONST && f != KL_FORM_IOTA && e->prim != KL_P_BROADCAST_IN_DIM &&
      e->prim != KL_P_RESHAPE)
    return 0;
  for (int i = 0; i < e->nin; i++)
    if (!row_cheap(k, st, e->ins[i], m, set, budget)) return 0;
  return 1;
}

/* Buffers this row kernel would load that it can recompute from the others it loads (softmax's
 * backward reads the scores and the probabilities' gradient; the probabilities, a buffer for
 * the products, are a few operations away from the scores): loading costs bandwidth, the
 * operations only registers. Returns a per-value flag array (NULL: none, or out of memory). */
static char *row_recompute(const kctx *k, const kl_plan_step *st, const char *set) {
  int nv = k->pg->nvals, any = 0;
  char *rec = kl_calloc((size_t)nv, 1);
  if (!rec) return NULL;
  for (int m = 0; m < nv; m++) {
    int budget = 48;
    if (set[m] && k->pg->vals[m].producer >= 0 && row_cheap(k, st, m, m, set, &budget)) rec[m] = 1, any = 1;
  }
  if (!any) {
    free(rec);
    return NULL;
  }
  return rec;
}

static void emit_register_row(kctx *k, const kl_plan_step *st, const kl_aval *oa, int rowk, int64_t row_len, int block,
                              ssa *idx, const char **shared, int *nshared) {
  const kl_program *pg = k->pg;
  static int recompute_on = -1;
  if (recompute_on < 0) {
    const char *ev = getenv("KILN_GPU_ROW_RECOMPUTE");
    recompute_on = !(ev && *ev == '0');
  }
  int nv = pg->nvals;
  char *seen = kl_calloc((size_t)nv * 2, 1), *set = seen ? seen + nv : NULL;
  if (seen) row_leaves(k, k->root, seen, set);
  k->recompute = recompute_on && seen ? row_recompute(k, st, set) : NULL;
  int per = (int)((row_len + block - 1) / block), masked = row_len % block != 0;
  ssa pos[KL_ROW_REG_ELEMS][KL_MAX_RANK], valid[KL_ROW_REG_ELEMS];
  for (int j = 0; j < per; j++) {
    ssa off, lin, last;
    memcpy(pos[j], idx, sizeof(ssa) * (size_t)rowk);
    if (j == 0) snprintf(lin, sizeof lin, "%%tid");
    else {
      kk_const_index(k, (int64_t)j * block, off);
      kk_line(k, "%s = arith.addi %%tid, %s : index", kk_fresh(k, lin), off);
    }
    if (masked) { /* threads past the row's end compute its last element and neither add nor store it */
      ssa len, cl;
      kk_const_index(k, row_len, len);
      kk_line(k, "%s = arith.cmpi ult, %s, %s : index", kk_fresh(k, valid[j]), lin, len);
      kk_const_index(k, row_len - 1, last);
      kk_line(k, "%s = arith.minui %s, %s : index", kk_fresh(k, cl), lin, last);
      snprintf(lin, sizeof lin, "%s", cl);
    }
    kk_delinearize(k, lin, oa->dims + rowk, oa->ndim - rowk, pos[j] + rowk);
  }
  /* Every buffer read at the row's own elements is loaded first, all loads in flight together:
   * a load first needed by a later stage would otherwise wait behind the earlier stages'
   * barriers, one memory latency per stage (softmax's backward took 1.17 ms rather than 0.7). */
  for (int m = 0; set && m < nv; m++)
    if (set[m] && !(k->recompute && k->recompute[m]) && pg->vals[m].aval.ndim == oa->ndim &&
        !memcmp(pg->vals[m].aval.dims, oa->dims, sizeof(int64_t) * (size_t)oa->ndim))
      for (int j = 0; j < per; j++) {
        ssa val;
        kk_emit_value(k, m, pos[j], val);
      }
  free(seen);
  for (int s = 0; s < st->nstages; s++) {
    const kl_eqn *r = &pg->eqns[st->stages[s]];
    kl_dtype t = pg->vals[r->outs[0]].aval.dtype;
    const char *ty = shared_type(t);
    ssa acc, init, res;
    shared_init(k, r->prim, t, init);
    snprintf(acc, sizeof acc, "%s", init);
    for (int j = 0; j < per; j++) {
      ssa val, c;
      kk_emit_value(k, r->ins[0], pos[j], val);
      to_shared(k, t, val);
      if (masked) {
        ssa m;
        kk_line(k, "%s = arith.select %s, %s, %s : %s", kk_fresh(k, m), valid[j], val, init, ty);
        snprintf(val, sizeof val, "%s", m);
      }
      kg_combine(k, r->prim, t, ty, acc, val, c);
      snprintf(acc, sizeof acc, "%s", c);
    }
    shared[*nshared] = ty;
    block_reduce(k, r->prim, t, (*nshared)++, block, acc, res);
    from_shared(k, t, res);
    kk_add_stage(k, r->outs[0], res);
  }
  int oi = kk_arg_index(k, st->root);
  for (int j = 0; j < per; j++) {
    ssa val; /* computed outside the guard: its memoized parts stay visible to later elements */
    kk_emit_value(k, st->root, pos[j], val);
    if (masked) kk_line(k, "scf.if %s {", valid[j]);
    kk_store_value(k, oa->dtype, val, oi, oa, pos[j], oa->ndim);
    if (masked) kk_line(k, "}");
  }
  free(k->recompute);
  k->recompute = NULL;
}

static void free_ctx(kctx *k) {
  for (int i = 0; i < k->nmemo; i++) free(k->memo[i].key);
  free(k->memo);
}

int kl_kernel_emit_gpu(const kl_plan *plan, int step, const char *name, kl_str *out, kl_gpu_kernel_info *info,
                       uint64_t *libdevice, char *err, size_t errlen) {
  /* Row kernels store the last stage's operand (softmax's exp(x - max)) in the output row and
   * read it back (measured 13% faster on an H100 than recomputing it); KILN_GPU_ROW_STASH=0
   * recomputes instead. */
  const char *stash_env = getenv("KILN_GPU_ROW_STASH");
  int row_stash = !(stash_env && *stash_env == '0');
  const kl_program *pg = plan->pg;
  const kl_plan_step *st = &plan->steps[step];
  const kl_eqn *e = &pg->eqns[st->eqn];
  const kl_aval *oa = &pg->vals[st->root].aval;
  int is_reduce = kl_prim_get(e->prim)->form == KL_FORM_REDUCE;
  const kl_aval *space = is_reduce ? &pg->vals[e->ins[0]].aval : oa;
  int n = space->ndim, reduced[KL_MAX_RANK] = {0}, nred = 0;
  if (is_reduce)
    for (int i = 0; i < e->p.reduce.axes.n; i++) reduced[e->p.reduce.axes.v[i]] = 1, nred++;
  /* the reduced axes form a suffix [rowk, n): row mode (or full mode when rowk == 0) */
  int rowk = -1;
  if (is_reduce && nred) {
    rowk = n - nred;
    for (int i = rowk; i < n; i++)
      if (!reduced[i]) rowk = -1;
  } else if (!is_reduce && st->nstages)
    rowk = st->row_axis;
  int64_t row_len = rowk >= 0 ? prod(space->dims, rowk, n) : 0;
  int mode; /* 0 elementwise, 1 row, 2 column, 3 full */
  if (!is_reduce) mode = st->nstages ? 1 : 0;
  else if (nred == 0) mode = 0;
  else if (rowk == 0) mode = 3;
  else if (rowk > 0 && (row_len > 16 || st->nstages)) mode = 1;
  else mode = 2;
  if (mode == 1 && !st->nstages && kl_dtype_size(oa->dtype) == 8 && row_len <= thread_rows() &&
      kl_aval_size(oa) >= 65536)
    mode = 2; /* many short rows of 8-byte values (no warp shuffles: the tree would sync per row) a thread each */
  else if (mode == 2 && kl_aval_size(space) / (kl_aval_size(oa) ? kl_aval_size(oa) : 1) >= 64) mode = 4;
  if (mode == 1 && st->nstages) row_len = prod(oa->dims, rowk, oa->ndim);

  kl_str body;
  kl_str_init(&body);
  kctx k = {.pg = pg, .plan = plan, .em = {.out = &body, .branches = 1}, .body = &body, .ind = "      ", .err = err, .errlen = errlen, .gpu = 1,
            .root = is_reduce ? -1 : st->root, .stash = -1, .libdevice = libdevice};
  memset(info, 0, sizeof *info);
  kl_dtype rt = oa->dtype;
  int block = GK_BLOCK;
  ssa idx[KL_MAX_RANK];
  const char *shared[KL_MAX_STAGES + 1];
  int nshared = 0;

  int tile_t = mode == 0 && !is_reduce ? transposed_read(plan, st->root) : -1;
  if (tile_t >= 0) { /* elementwise, reading an operand transposed: 32x32 tiles through shared memory */
    emit_tiled(&k, plan, st->root, tile_t, info);
    block = 256;
    shared[nshared++] = kl_storage_type(pg->vals[pg->eqns[pg->vals[tile_t].producer].ins[0]].aval.dtype);
    shared_elems = 32 * 33;
  } else if (mode == 0) { /* elementwise (or a reduction over no axes) */
    int64_t total = kl_aval_size(oa);
    /* Each thread takes `vec` consecutive elements: more loads in flight, and adjacent
     * accesses of 16-byte aligned arrays that LLVM merges into vector loads and stores. */
    int vec = total % 4 == 0 && total >= 4096 ? 4 : 1;
    ssa g0, gid, gs, tot;
    kk_line(&k, "%s = arith.muli %%bid, %%bdim : index", kk_fresh(&k, g0));
    kk_line(&k, "%s = arith.addi %s, %%tid : index", kk_fresh(&k, gid), g0);
    kk_line(&k, "%s = arith.muli %%nblk, %%bdim : index", kk_fresh(&k, gs));
    kk_const_index(&k, total / vec, tot);
    kk_line(&k, "scf.for %%lin = %s to %s step %s {", gid, tot, gs);
    k.ind = "        ";
    for (int j = 0; j < vec; j++) {
      ssa lin, val;
      if (vec == 1) snprintf(lin, sizeof lin, "%%lin");
      else {
        ssa c4, b4, cj;
        kk_const_index(&k, vec, c4);
        kk_line(&k, "%s = arith.muli %%lin, %s : index", kk_fresh(&k, b4), c4);
        kk_const_index(&k, j, cj);
        kk_line(&k, "%s = arith.addi %s, %s : index", kk_fresh(&k, lin), b4, cj);
      }
      kk_delinearize(&k, lin, oa->dims, oa->ndim, idx);
      kk_emit_value(&k, is_reduce ? e->ins[0] : st->root, idx, val);
      int oi = kk_arg_index(&k, st->root);
      kk_store_value(&k, rt, val, oi, oa, idx, oa->ndim);
    }
    k.ind = "      ";
    kk_line(&k, "}");
    info->grid = grid_for(total / vec, block);
  } else if (mode == 2) { /* column: one thread per output element */
    int64_t total = kl_aval_size(oa);
    ssa g0, gid, gs, tot, kept[KL_MAX_RANK];
    kk_line(&k, "%s = arith.muli %%bid, %%bdim : index", kk_fresh(&k, g0));
    kk_line(&k, "%s = arith.addi %s, %%tid : index", kk_fresh(&k, gid), g0);
    kk_line(&k, "%s = arith.muli %%nblk, %%bdim : index", kk_fresh(&k, gs));
    kk_const_index(&k, total, tot);
    kk_line(&k, "scf.for %%lin = %s to %s step %s {", gid, tot, gs);
    k.ind = "        ";
    int64_t kdims[KL_MAX_RANK], rdims[KL_MAX_RANK];
    int nk = 0, nr = 0, kpos[KL_MAX_RANK], rpos[KL_MAX_RANK];
    for (int i = 0; i < n; i++) {
      if (reduced[i]) rdims[nr] = space->dims[i], rpos[nr++] = i;
      else kdims[nk] = space->dims[i], kpos[nk++] = i;
    }
    kk_delinearize(&k, "%lin", kdims, nk, kept);
    for (int i = 0; i < nk; i++) memcpy(idx[kpos[i]], kept[i], sizeof(ssa));
    /* the reduced axes, flattened, walked by this thread alone */
    ssa part;
    reduced_accumulate(&k, e, rt, rdims, nr, rpos, idx, "%c0", 1, part);
    store_result(&k, rt, part, kk_arg_index(&k, st->root), oa, kept, nk);
    k.ind = "      ";
    kk_line(&k, "}");
    info->grid = grid_for(total, block);
  } else if (mode == 4) { /* column block: w output elements per block, the reduced axes split over slices */
    int64_t kept_total = kl_aval_size(oa), red_total = kl_aval_size(space) / kept_total;
    /* w adjacent columns per block (w >= 8: reads of 32-byte sectors at least); fewer columns
     * than 64 blocks of 32 take narrower blocks, so that more of the GPU works (a bias gradient
     * of 128 columns: 16 blocks of 8 columns rather than 4 of 32) */
    int w = 32;
    while (w > 8 && (kept_total + w - 1) / w < 64) w /= 2;
    int slices = red_total >= 1024 && w == 32 ? 32 : 256 / w;
    block = w * slices;
    int64_t kdims[KL_MAX_RANK], rdims[KL_MAX_RANK];
    int nk = 0, nr = 0, kpos[KL_MAX_RANK], rpos[KL_MAX_RANK];
    for (int i = 0; i < n; i++) {
      if (reduced[i]) rdims[nr] = space->dims[i], rpos[nr++] = i;
      else kdims[nk] = space->dims[i], kpos[nk++] = i;
    }
    ssa c32, lane, slice, b32, kc, kmax, kcl, kept[KL_MAX_RANK], part;
    kk_const_index(&k, w, c32);
    kk_line(&k, "%s = arith.remui %%tid, %s : index", kk_fresh(&k, lane), c32);
    kk_line(&k, "%s = arith.divui %%tid, %s : index", kk_fresh(&k, slice), c32);
    kk_line(&k, "%s = arith.muli %%bid, %s : index", kk_fresh(&k, b32), c32);
    kk_line(&k, "%s = arith.addi %s, %s : index", kk_fresh(&k, kc), b32, lane);
    kk_const_index(&k, kept_total - 1, kmax);
    kk_line(&k, "%s = arith.minui %s, %s : index", kk_fresh(&k, kcl), kc, kmax); /* lanes past the end read the last column */
    kk_delinearize(&k, kcl, kdims, nk, kept);
    for (int i = 0; i < nk; i++) memcpy(idx[kpos[i]], kept[i], sizeof(ssa));
    const char *ty = shared_type(rt);
    reduced_accumulate(&k, e, rt, rdims, nr, rpos, idx, slice, slices, part);
    shared[nshared++] = ty;
    kk_line(&k, "memref.store %s, %%sh0[%%tid] : memref<%dx%s, #gpu.address_space<workgroup>>", part, block, ty);
    kk_line(&k, "gpu.barrier");
    ssa first, inr, ok;
    kk_line(&k, "%s = arith.cmpi ult, %%tid, %s : index", kk_fresh(&k, first), c32);
    kk_const_index(&k, kept_total, inr);
    kk_line(&k, "%s = arith.cmpi ult, %s, %s : index", kk_fresh(&k, ok), kc, inr);
    ssa both;
    kk_line(&k, "%s = arith.andi %s, %s : i1", kk_fresh(&k, both), first, ok);
    kk_line(&k, "scf.if %s {", both);
    k.ind = "        ";
    ssa r;
    kk_line(&k, "%s = memref.load %%sh0[%%tid] : memref<%dx%s, #gpu.address_space<workgroup>>", kk_fresh(&k, r), block, ty);
    for (int q = 1; q < slices; q++) {
      ssa off, o, y, z;
      kk_const_index(&k, (int64_t)w * q, off);
      kk_line(&k, "%s = arith.addi %%tid, %s : index", kk_fresh(&k, o), off);
      kk_line(&k, "%s = memref.load %%sh0[%s] : memref<%dx%s, #gpu.address_space<workgroup>>", kk_fresh(&k, y), o, block, ty);
      kg_combine(&k, e->prim, rt, ty, r, y, z);
      snprintf(r, sizeof r, "%s", z);
    }
    store_result(&k, rt, r, kk_arg_index(&k, st->root), oa, kept, nk);
    k.ind = "      ";
    kk_line(&k, "}");
    info->grid = (unsigned)((kept_total + w - 1) / w);
  } else if (mode == 1) { /* row: one block per row */
    int64_t rows = prod(space->dims, 0, rowk);
    int64_t longest = row_len;
    for (int j = 0; j < st->nstages; j++) {
      const kl_aval *x = &pg->vals[pg->eqns[st->stages[j]].ins[0]].aval;
      int64_t l = prod(x->dims, rowk, x->ndim);
      if (l > longest) longest = l;
    }
    /* long rows get more threads (each thread keeps ~16 elements per pass in flight; rows of up
     * to 2048 elements KILN_GPU_ROW_ELEMS, the experiment's knob) */
    static int row_elems = -1;
    if (row_elems < 0) {
      const char *ev = getenv("KILN_GPU_ROW_ELEMS");
      row_elems = ev && atoi(ev) > 0 ? atoi(ev) : 16;
    }
    int per = longest <= 2048 ? row_elems : 16;
    block = pow2_at_least((longest + per - 1) / per, 32, 1024);
    if (block < GK_BLOCK && longest > block) block = pow2_at_least(longest, 32, GK_BLOCK);
    ssa rtot;
    kk_const_index(&k, rows, rtot);
    kk_line(&k, "scf.for %%row = %%bid to %s step %%nblk {", rtot);
    k.ind = "        ";
    kk_delinearize(&k, "%row", space->dims, rowk, idx);
    int regs = !is_reduce ? register_row(pg, st, oa, rowk, row_len) : 0;
    if (regs) {
      block = regs;
      emit_register_row(&k, st, oa, rowk, row_len, block, idx, shared, &nshared);
    } else if (!is_reduce) {
      const kl_eqn *last = &pg->eqns[st->stages[st->nstages - 1]];
      int cand = last->ins[0];
      if (pg->vals[cand].aval.dtype == oa->dtype && oa->dtype != KL_BOOL && !plan->materialized[cand] &&
          kk_expr_uses(pg, plan, st->root, cand) && pg->vals[cand].aval.ndim == oa->ndim &&
          !memcmp(pg->vals[cand].aval.dims, oa->dims, sizeof(int64_t) * (size_t)oa->ndim))
        k.stash = row_stash ? cand : -1;
      for (int j = 0; j < st->nstages; j++) {
        const kl_eqn *r = &pg->eqns[st->stages[j]];
        const kl_aval *x = &pg->vals[r->ins[0]].aval;
        kl_dtype t = pg->vals[r->outs[0]].aval.dtype;
        ssa part, res;
        strided_accumulate(&k, r->prim, t, r->ins[0], x->dims, x->ndim, rowk, idx, "%tid", prod(x->dims, rowk, x->ndim),
                           "%bdim", j, 1, part);
        shared[nshared] = shared_type(t);
        block_reduce(&k, r->prim, t, nshared++, block, part, res);
        from_shared(&k, t, res);
        kk_add_stage(&k, r->outs[0], res);
      }
      k.stash_ready = k.stash >= 0;
      ssa otot, val;
      kk_const_index(&k, row_len, otot);
      kk_line(&k, "scf.for %%jo = %%tid to %s step %%bdim {", otot);
      k.ind = "          ";
      kk_delinearize(&k, "%jo", oa->dims + rowk, oa->ndim - rowk, idx + rowk);
      k.main_idx = (const ssa *)idx;
      kk_emit_value(&k, st->root, idx, val);
      int oi = kk_arg_index(&k, st->root);
      kk_store_value(&k, rt, val, oi, oa, idx, oa->ndim);
      k.ind = "        ";
      kk_line(&k, "}");
    } else {
      ssa part, res, is0;
      strided_accumulate(&k, e->prim, rt, e->ins[0], space->dims, n, rowk, idx, "%tid", row_len, "%bdim", 0, 1, part);
      shared[nshared] = shared_type(rt);
      block_reduce(&k, e->prim, rt, nshared++, block, part, res);
      kk_line(&k, "%s = arith.cmpi eq, %%tid, %%c0 : index", kk_fresh(&k, is0));
      kk_line(&k, "scf.if %s {", is0);
      k.ind = "          ";
      store_result(&k, rt, res, kk_arg_index(&k, st->root), oa, idx, rowk);
      k.ind = "        ";
      kk_line(&k, "}");
    }
    k.ind = "      ";
    kk_line(&k, "}");
    info->grid = grid_for(rows, 1);
  } else { /* full reduction: per-block partials, then one block combines them */
    int64_t total = kl_aval_size(space);
    int vec = total % 4 == 0 && total >= 4096 ? 4 : 1;
    int64_t blocks = (total + (int64_t)block * 16 - 1) / ((int64_t)block * 16); /* >= 16 elements per thread */
    if (blocks > 2048) blocks = 2048;
    if (blocks < 1) blocks = 1;
    ssa g0, gid, gs, part, res, is0;
    kk_line(&k, "%s = arith.muli %%bid, %%bdim : index", kk_fresh(&k, g0));
    kk_line(&k, "%s = arith.addi %s, %%tid : index", kk_fresh(&k, gid), g0);
    kk_line(&k, "%s = arith.muli %%nblk, %%bdim : index", kk_fresh(&k, gs));
    strided_accumulate(&k, e->prim, rt, e->ins[0], space->dims, n, 0, idx, gid, total, gs, 0, vec, part);
    shared[nshared] = shared_type(rt);
    block_reduce(&k, e->prim, rt, nshared++, block, part, res);
    kk_line(&k, "%s = arith.cmpi eq, %%tid, %%c0 : index", kk_fresh(&k, is0));
    kk_line(&k, "scf.if %s {", is0);
    k.ind = "        ";
    int scratch_arg = -1;
    if (blocks == 1) store_result(&k, rt, res, kk_arg_index(&k, st->root), oa, idx, 0);
    else {
      scratch_arg = k.nargs; /* after the inputs; the output is not an argument of this kernel */
      kk_line(&k, "memref.store %s, %%m%d[%%bid] : memref<%lldx%s>", res, scratch_arg, (long long)blocks, shared_type(rt));
    }
    k.ind = "      ";
    kk_line(&k, "}");
    info->grid = (unsigned)blocks;
    if (scratch_arg >= 0) info->partials = blocks;
  }
  if (k.failed) {
    free_ctx(&k);
    free(k.args);
    kl_str_free(&body);
    return -1;
  }

  /* arguments: materialized values read, the output (written) last */
  int nargs = k.nargs + (info->partials ? 1 : 0);
  kg_arg *args = kl_calloc((size_t)nargs + 2, sizeof *args);
  if (!args) {
    kk_nomem(&k);
    free_ctx(&k);
    free(k.args);
    kl_str_free(&body);
    return -1;
  }
  int written = kk_arg_find(&k, st->root); /* (a temporary it reads may share its argument) */
  for (int i = 0; i < k.nargs; i++) arg_of(&args[i], &pg->vals[k.args[i]].aval, i != written);
  if (info->partials) {
    args[k.nargs].ndim = 1;
    args[k.nargs].dims[0] = info->partials;
    args[k.nargs].storage = shared_type(rt);
  }
  emit_header(out, name, args, nargs, shared, nshared, block);
  shared_elems = 0;
  kk_append_text(out, &body);
  kl_str_append(out, "      gpu.return\n    }\n");
  info->block = (unsigned)block;
  info->partial_dtype = rt;

  if (info->partials) { /* the combining kernel: name_f(partials, output) */
    kl_str b2;
    kl_str_init(&b2);
    kctx k2 = {.pg = pg, .plan = plan, .em = {.out = &b2, .branches = 1}, .body = &b2, .ind = "      ", .err = err, .errlen = errlen, .root = -1,
               .stash = -1};
    const char *ty = shared_type(rt);
    ssa init, tot, part2, res2, is0;
    shared_init(&k2, e->prim, rt, init);
    kk_const_index(&k2, info->partials, tot);
    kk_line(&k2, "%%accf = scf.for %%jf = %%tid to %s step %%bdim iter_args(%%af = %s) -> (%s) {", tot, init, ty);
    k2.ind = "        ";
    ssa v, c;
    kk_line(&k2, "%s = memref.load %%m0[%%jf] : memref<%lldx%s>", kk_fresh(&k2, v), (long long)info->partials, ty);
    kg_combine(&k2, e->prim, rt, ty, "%af", v, c);
    kk_line(&k2, "scf.yield %s : %s", c, ty);
    k2.ind = "      ";
    kk_line(&k2, "}");
    snprintf(part2, sizeof part2, "%%accf");
    block_reduce(&k2, e->prim, rt, 0, block, part2, res2);
    kk_line(&k2, "%s = arith.cmpi eq, %%tid, %%c0 : index", kk_fresh(&k2, is0));
    kk_line(&k2, "scf.if %s {", is0);
    k2.ind = "        ";
    store_result(&k2, rt, res2, 1, oa, idx, 0);
    k2.ind = "      ";
    kk_line(&k2, "}");
    kg_arg a2[2];
    memset(a2, 0, sizeof a2);
    a2[0] = args[k.nargs];
    a2[0].readonly = 1;
    arg_of(&a2[1], oa, 0);
    char name2[64];
    snprintf(name2, sizeof name2, "%s_f", name);
    const char *sh2[1] = {ty};
    emit_header(out, name2, a2, 2, sh2, 1, block);
    kk_append_text(out, &b2);
    if (k2.failed) { /* its message is written; the check below fails the kernel */
      k.failed = 1;
      out->failed = 1;
    }
    free(k2.args);
    kl_str_append(out, "      gpu.return\n    }\n");
    kl_str_free(&b2);
    free_ctx(&k2);
  }
  free(args);
  /* info->args: the values read, then the output last (even when a full reduction writes its
   * output from the second kernel) */
  int has_out = 0;
  for (int i = 0; i < k.nargs; i++) has_out |= k.args[i] == st->root;
  if (!has_out) kk_arg_index(&k, st->root);
  if (k.failed || out->failed) {
    kk_nomem(&k); /* keeps a message already written */
    free_ctx(&k);
    free(k.args);
    kl_str_free(&body);
    return -1;
  }
  info->args = k.args;
  info->nargs = k.nargs;
  free_ctx(&k);
  kl_str_free(&body);
  return 0;
}

/* ---- library steps as kernels of their own ----
 * Library calls on the CPU that a family also writes as GPU kernels (the row's gpu_kernel:
 * gathers, scatters, dynamic slices in codegen/lower/index.c, argmax/argmin and the scans in
 * reduce.c and cumulative.c): they move elements by their storage type, with the host's rules.
 * This part sets their arguments up and closes each kernel. */

static void flat_arg(kg_arg *a, const kl_aval *v, int readonly) {
  memset(a, 0, sizeof *a);
  a->ndim = 1;
  a->dims[0] = kl_aval_size(v) ? kl_aval_size(v) : 1;
  a->storage = kl_storage_type(v->dtype);
  a->readonly = readonly;
}

void kg_update(kctx *k, const char *op, char *acc, const char *b, const char *ty) {
  ssa t;
  kk_line(k, "%s = arith.%s %s, %s : %s", kk_fresh(k, t), op, acc, b, ty);
  snprintf(acc, sizeof(ssa), "%s", t);
}

/* Indices are clamped or checked at 64 bits before they become (possibly 32-bit) index values. */
void kg_load_index64(kctx *k, int i, const char *pos, const kg_arg *a, kl_dtype t, char *out) {
  ssa v;
  kk_line(k, "%s = memref.load %%m%d[%s] : memref<%lldx%s>", kk_fresh(k, v), i, pos, (long long)a->dims[0], a->storage);
  if (!strcmp(a->storage, "i64")) {
    snprintf(out, sizeof(ssa), "%s", v);
    return;
  }
  kk_line(k, "%s = arith.%s %s : %s to i64", kk_fresh(k, out), kl_dtype_kind(t) == KL_KIND_UINT ? "extui" : "extsi", v,
          a->storage);
}

/* clamp(v, 0, hi) of an i64 index value of dtype t. */
void kg_clamp_index(kctx *k, const char *v, kl_dtype t, int64_t hi, char *out) {
  ssa h, l, a;
  kk_line(k, "%s = arith.constant %lld : i64", kk_fresh(k, h), (long long)hi);
  if (kl_dtype_kind(t) == KL_KIND_UINT) {
    kk_line(k, "%s = arith.minui %s, %s : i64", kk_fresh(k, a), v, h);
  } else {
    kk_line(k, "%s = arith.constant 0 : i64", kk_fresh(k, l));
    kk_line(k, "%s = arith.maxsi %s, %s : i64", kk_fresh(k, a), v, l);
    kg_update(k, "minsi", a, h, "i64");
  }
  kk_line(k, "%s = arith.index_cast %s : i64 to index", kk_fresh(k, out), a);
}

/* out may be a. */
void kg_index_op(kctx *k, const char *op, const char *a, int64_t b, char *out) {
  ssa c, t;
  kk_const_index(k, b, c);
  kk_line(k, "%s = arith.%s %s, %s : index", kk_fresh(k, t), op, a, c);
  snprintf(out, sizeof(ssa), "%s", t);
}

/* Closed by kg_close_loop. */
void kg_grid_loop(kctx *k, int64_t total, const char *iv) {
  ssa g0, gid, gs, tot;
  kk_line(k, "%s = arith.muli %%bid, %%bdim : index", kk_fresh(k, g0));
  kk_line(k, "%s = arith.addi %s, %%tid : index", kk_fresh(k, gid), g0);
  kk_line(k, "%s = arith.muli %%nblk, %%bdim : index", kk_fresh(k, gs));
  kk_const_index(k, total, tot);
  kk_line(k, "scf.for %s = %s to %s step %s {", iv, gid, tot, gs);
  k->ind = "        ";
}

void kg_close_loop(kctx *k) {
  k->ind = "      ";
  kk_line(k, "}");
}

void kg_finish(kg_move *m, int64_t work) {
  char name[64];
  snprintf(name, sizeof name, m->nk ? "%s_s" : "%s", m->name);
  emit_header(m->out, name, m->args, m->nargs, NULL, 0, GK_BLOCK);
  kk_append_text(m->out, &m->body);
  kl_str_append(m->out, "      gpu.return\n    }\n");
  m->grid[m->nk++] = grid_for(work, GK_BLOCK);
  kl_str_free(&m->body);
  kl_str_init(&m->body);
}

int kl_kernel_emit_gpu_move(const kl_libcall *c, const char *name, kl_str *out, unsigned *grid, unsigned *block,
                            int *in_place, char *err, size_t errlen) {
  kl_gpu_kernel_fn emit = kl_lower_get(c->prim)->gpu_kernel;
  const kl_aval *o = &c->avals[c->nin];
  int nargs = c->nin + c->nout;
  if (!emit || c->nout != 1 || nargs > 16 || kl_aval_size(o) == 0) return 0;
  kg_move m = {.c = c, .nargs = nargs, .oi = c->nin, .name = name, .out = out, .grid = grid};
  for (int i = 0; i < nargs; i++) flat_arg(&m.args[i], &c->avals[i], i < c->nin);
  m.st = m.args[0].storage;
  kl_str_init(&m.body);
  m.k = (kctx){.em = {.out = &m.body, .branches = 1}, .body = &m.body, .ind = "      ", .err = err, .errlen = errlen, .root = -1, .stash = -1,
               .gpu = 1};
  block[0] = block[1] = GK_BLOCK;
  int nk = emit(&m);
  *in_place = m.in_place;
  if (nk >= 0 && (m.k.failed || m.body.failed || out->failed)) {
    kk_nomem(&m.k); /* keeps a message already written */
    nk = -1;
  }
  kl_str_free(&m.body);
  free_ctx(&m.k);
  free(m.k.args);
  return nk;
}
