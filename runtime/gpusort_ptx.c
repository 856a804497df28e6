/* gpusort_ptx.c: the kernels of the GPU sort (runtime/gpusort.c), PTX written by hand and
 * generated here once: C loops unroll the per-item code a register array needs, and the small-row
 * kernel comes in one variant per row capacity. Every parameter is 64 bits (kl_cuda_launch passes
 * pointer-sized values); blocks are 256 threads (8 warps); indices are 32-bit (the driver keeps
 * sorts under 2^31 elements). Depends on ir/str.h only.
 *
 * Why PTX and not kiln's MLIR codegen: the radix passes need warp collectives (ballots find the
 * lanes sharing a digit, shfl hands out counters and scans), static shared arrays with
 * block barriers between phases, and a register array per thread; kiln's MLIR kernels are
 * elementwise/reduction loops that express none of these, and the gpu dialect's versions would
 * go through MLIR 19's NVVM lowering for every process (seconds of compile per shape) where this
 * text is linked once by the driver. Like cusolver_ptx.c and cuda_graph.c's kernels, it needs no
 * toolkit at build or run time. tests/test_sort_ptx.py runs these kernels on a PTX interpreter
 * (tests/ptxsim.py) against NumPy, so a change can be checked without a GPU.
 *
 * Keys. Each key becomes one or two 32-bit words of an unsigned code that orders as lax.sort
 * does (encode below): unsigned ints as they are, signed ints with the sign bit flipped, bool as
 * 0/1, floats by the usual sign flip after -0 is made +0 and every NaN the largest code. The
 * codes of -0 and NaN lose bits, so outputs are gathered from the inputs through the permutation;
 * only a one-operand sort writes decoded codes, with ks_fixup restoring -0 and NaN payloads. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdarg.h>
#include <string.h>

#include "../ir/str.h"
#include "gpusort.h"

#define NT 256      /* threads per block */
#define NW (NT / 32) /* warps per block */
#define TILE_IT 16  /* items per thread of a tile of the multi-block passes */

#define E(...) kl_str_printf(s, __VA_ARGS__)

/* ---- pieces shared by the kernels ---- */

/* .entry name(params), every parameter .u64 and loaded into %a_<name>; the thread's coordinates
 * in %tx (thread), %bx (block), %nt (threads per block), %lane, %wid (warp), %ltm (lanes below). */
static void entry_with(kl_str *s, const char *name, const char *params, const char *directives) {
  char buf[400], *save = NULL;
  snprintf(buf, sizeof buf, "%s", params);
  E(".visible .entry %s(", name);
  int first = 1;
  for (char *p = strtok_r(buf, " ", &save); p; p = strtok_r(NULL, " ", &save), first = 0)
    E("%s.param .u64 %s", first ? "" : ", ", p);
  E(")\n%s{\n  .reg .pred %%p<24>;\n  .reg .b32 %%t<24>;\n  .reg .b64 %%u<24>;\n", directives);
  E("  .reg .b32 %%tx, %%bx, %%nt, %%lane, %%wid, %%ltm;\n");
  snprintf(buf, sizeof buf, "%s", params);
  for (char *p = strtok_r(buf, " ", &save); p; p = strtok_r(NULL, " ", &save))
    E("  .reg .b64 %%a_%s;\n  ld.param.u64 %%a_%s, [%s];\n", p, p, p);
  E("  mov.u32 %%tx, %%tid.x;\n  mov.u32 %%bx, %%ctaid.x;\n  mov.u32 %%nt, %%ntid.x;\n  mov.u32 %%lane, %%laneid;\n"
    "  shr.u32 %%wid, %%tx, 5;\n  mov.u32 %%ltm, %%lanemask_lt;\n");
}

static void entry(kl_str *s, const char *name, const char *params) { entry_with(s, name, params, ""); }

/* 32-bit copies of 64-bit parameters: %<name>32. */
static void narrow(kl_str *s, const char *names) {
  char buf[200], *save = NULL;
  snprintf(buf, sizeof buf, "%s", names);
  for (char *p = strtok_r(buf, " ", &save); p; p = strtok_r(NULL, " ", &save))
    E("  .reg .b32 %%%s32;\n  cvt.u32.u64 %%%s32, %%a_%s;\n", p, p, p);
}

/* Predicates %<pfx>1, 2, 4, 8: the element size held by parameter esz. */
static void size_preds(kl_str *s, const char *pfx, const char *esz) {
  E("  .reg .pred %%%s1, %%%s2, %%%s4, %%%s8;\n", pfx, pfx, pfx, pfx);
  for (int b = 1; b <= 8; b *= 2) E("  setp.eq.u64 %%%s%d, %%a_%s, %d;\n", pfx, b, esz, b);
}

/* u64 raw = the element (size by the %<pfx>* predicates) at u64 address addr, zero-extended;
 * only where guard holds ("" for always; else raw is 0). Uses %t0, %p0-%p3. */
static void load_raw(kl_str *s, const char *pfx, const char *addr, const char *raw, const char *guard) {
  const char *sz[4] = {"1", "2", "4", "8"};
  for (int i = 0; i < 4; i++)
    if (*guard) E("  and.pred %%p%d, %%%s%s, %s;\n", i, pfx, sz[i], guard);
    else E("  mov.pred %%p%d, %%%s%s;\n", i, pfx, sz[i]);
  E("  mov.u32 %%t0, 0;\n  @%%p0 ld.global.u8 %%t0, [%s];\n  @%%p1 ld.global.u16 %%t0, [%s];\n"
    "  @%%p2 ld.global.u32 %%t0, [%s];\n  cvt.u64.u32 %s, %%t0;\n  @%%p3 ld.global.u64 %s, [%s];\n",
    addr, addr, addr, raw, raw, addr);
}

/* Stores u64 raw's low bytes (size by the %<pfx>* predicates) at u64 address addr where guard
 * holds. Uses %t0, %p0-%p3. */
static void store_raw(kl_str *s, const char *pfx, const char *addr, const char *raw, const char *guard) {
  const char *sz[4] = {"1", "2", "4", "8"};
  for (int i = 0; i < 4; i++)
    if (*guard) E("  and.pred %%p%d, %%%s%s, %s;\n", i, pfx, sz[i], guard);
    else E("  mov.pred %%p%d, %%%s%s;\n", i, pfx, sz[i]);
  E("  cvt.u32.u64 %%t0, %s;\n  @%%p0 st.global.u8 [%s], %%t0;\n  @%%p1 st.global.u16 [%s], %%t0;\n"
    "  @%%p2 st.global.u32 [%s], %%t0;\n  @%%p3 st.global.u64 [%s], %s;\n",
    raw, addr, addr, addr, addr, raw);
}

/* The key parameters (esz cls sign mask inf word): predicates %pcs (signed), %pcf (float), %pcb
 * (bool), %pw1 (the high word), %absm (mask without the sign bit), sizes as %pz*. */
static void key_setup(kl_str *s) {
  size_preds(s, "pz", "esz");
  E("  .reg .pred %%pcs, %%pcf, %%pcb, %%pw1, %%pnan, %%pzero, %%pneg;\n  .reg .b64 %%absm;\n"
    "  setp.eq.u64 %%pcs, %%a_cls, 1;\n  setp.eq.u64 %%pcf, %%a_cls, 2;\n  setp.eq.u64 %%pcb, %%a_cls, 3;\n"
    "  setp.ne.u64 %%pw1, %%a_word, 0;\n  xor.b64 %%absm, %%a_mask, %%a_sign;\n");
}

/* u32 code = the word of raw's order-preserving code (see the header); leaves %pnan, %pzero and
 * %pneg (a float's class). Uses %u0-%u5. */
static void encode(kl_str *s, const char *raw, const char *code) {
  E("  and.b64 %%u0, %s, %%absm;\n  setp.gt.u64 %%pnan, %%u0, %%a_inf;\n  setp.eq.u64 %%pzero, %%u0, 0;\n"
    "  and.b64 %%u1, %s, %%a_sign;\n  setp.ne.u64 %%pneg, %%u1, 0;\n"
    "  not.b64 %%u2, %s;\n  and.b64 %%u2, %%u2, %%a_mask;\n  or.b64 %%u3, %s, %%a_sign;\n"
    "  selp.b64 %%u2, %%u2, %%u3, %%pneg;\n  selp.b64 %%u2, %%a_sign, %%u2, %%pzero;\n"
    "  selp.b64 %%u2, %%a_mask, %%u2, %%pnan;\n"            /* float */
    "  mov.b64 %%u4, %s;\n  xor.b64 %%u5, %s, %%a_sign;\n  @%%pcs mov.b64 %%u4, %%u5;\n" /* ints */
    "  @%%pcf mov.b64 %%u4, %%u2;\n  setp.ne.u64 %%p4, %s, 0;\n  selp.b64 %%u5, 1, 0, %%p4;\n"
    "  @%%pcb mov.b64 %%u4, %%u5;\n  shr.b64 %%u5, %%u4, 32;\n  selp.b64 %%u4, %%u5, %%u4, %%pw1;\n"
    "  cvt.u32.u64 %s, %%u4;\n",
    raw, raw, raw, raw, raw, raw, raw, code);
}

/* u64 raw = the value of a one-word code (inverse of encode; NaN's code gives the parameter
 * canon, -0's +0). Uses %u0-%u4, %p4. */
static void decode(kl_str *s, const char *code, const char *raw) {
  E("  cvt.u64.u32 %%u0, %s;\n  and.b64 %%u1, %%u0, %%a_sign;\n  setp.ne.u64 %%p4, %%u1, 0;\n"
    "  xor.b64 %%u2, %%u0, %%a_sign;\n  not.b64 %%u3, %%u0;\n  and.b64 %%u3, %%u3, %%a_mask;\n"
    "  selp.b64 %%u3, %%u2, %%u3, %%p4;\n  setp.eq.u64 %%p4, %%u0, %%a_mask;\n"
    "  selp.b64 %%u3, %%a_canon, %%u3, %%p4;\n" /* float */
    "  mov.b64 %s, %%u0;\n  @%%pcs mov.b64 %s, %%u2;\n  @%%pcf mov.b64 %s, %%u3;\n",
    code, raw, raw, raw);
}

/* From flat index %i (row-major over rows of n): %row, %j (position in the row), %o and %ii (the
 * row's outer and inner coordinates); needs %n32, %inner32. */
static void split(kl_str *s, const char *i) {
  E("  div.u32 %%row, %s, %%n32;\n  mul.lo.u32 %%t1, %%row, %%n32;\n  sub.u32 %%j, %s, %%t1;\n"
    "  div.u32 %%o, %%row, %%inner32;\n  mul.lo.u32 %%t1, %%o, %%inner32;\n  sub.u32 %%ii, %%row, %%t1;\n",
    i, i);
}

/* u64 addr = base + esz * (the element at position q of the row of %o, %ii). Uses %t1, %t2. */
static void elem_addr(kl_str *s, const char *addr, const char *base, const char *esz32, const char *q) {
  E("  mad.lo.u32 %%t1, %%o, %%n32, %s;\n  mad.lo.u32 %%t1, %%t1, %%inner32, %%ii;\n"
    "  mul.wide.u32 %s, %%t1, %s;\n  add.u64 %s, %s, %s;\n",
    q, addr, esz32, addr, addr, base);
}

/* The grid-stride loop over %i < %total32: L_loop ... L_next; the body is the caller's. */
static void grid_loop_open(kl_str *s) {
  E("  .reg .b32 %%i, %%stride, %%row, %%j, %%o, %%ii;\n  mov.u32 %%t1, %%nctaid.x;\n"
    "  mul.lo.u32 %%stride, %%t1, %%nt;\n  mad.lo.u32 %%i, %%bx, %%nt, %%tx;\n"
    "L_loop:\n  setp.ge.u32 %%p5, %%i, %%total32;\n  @%%p5 bra L_end;\n");
}
static void grid_loop_close(kl_str *s) {
  E("  add.u32 %%i, %%i, %%stride;\n  bra L_loop;\nL_end:\n  ret;\n}\n\n");
}

/* Exclusive block-wide scan of u32 x (one per thread, in thread order): ex, and the block's
 * total in tot; needs shared s_ws[NW]. Starts and ends with the block converged; ends with a
 * barrier (s_ws is free again). Uses %t3-%t6, %p6. */
static void block_scan(kl_str *s, const char *x, const char *ex, const char *tot) {
  E("  mov.u32 %%t3, %s;\n", x);
  for (int o = 1; o < 32; o *= 2)
    E("  shfl.sync.up.b32 %%t4|%%p6, %%t3, %d, 0, -1;\n  @%%p6 add.u32 %%t3, %%t3, %%t4;\n", o);
  E("  setp.eq.u32 %%p6, %%lane, 31;\n  mov.u32 %%t5, s_ws;\n  shl.b32 %%t6, %%wid, 2;\n  add.u32 %%t6, %%t5, %%t6;\n"
    "  @%%p6 st.shared.u32 [%%t6], %%t3;\n  bar.sync 0;\n  sub.u32 %s, %%t3, %s;\n  mov.u32 %s, 0;\n",
    ex, x, tot);
  for (int w = 0; w < NW; w++)
    E("  ld.shared.u32 %%t4, [%%t5+%d];\n  add.u32 %s, %s, %%t4;\n  setp.gt.u32 %%p6, %%wid, %d;\n"
      "  @%%p6 add.u32 %s, %s, %%t4;\n",
      4 * w, tot, tot, w, ex, ex);
  E("  bar.sync 0;\n");
}

/* Shared arrays of the ranking kernels: per-warp digit counters, digit starts, the tile's global
 * offsets, warp sums, and the exchange of keys (and values, has_v) of cap items. */
static void rank_shared(kl_str *s, int cap, int has_v) {
  E("  .shared .align 16 .b8 s_cnt[%d];\n  .shared .align 16 .b8 s_lst[1024];\n  .shared .align 16 .b8 s_gd[1024];\n"
    "  .shared .align 16 .b8 s_ws[%d];\n  .shared .align 16 .b8 s_xk[%d];\n",
    NW * 256 * 4, NW * 4, cap * 4);
  if (has_v) E("  .shared .align 16 .b8 s_xv[%d];\n", cap * 4);
  E("  .reg .b32 %%scnt, %%slst, %%sgd, %%sxk, %%sxv, %%swc, %%sh, %%bm, %%cz, %%bb, %%bal;\n  .reg .pred %%pb;\n"
    "  mov.u32 %%scnt, s_cnt;\n  mov.u32 %%slst, s_lst;\n  mov.u32 %%sgd, s_gd;\n  mov.u32 %%sxk, s_xk;\n"
    "  shl.b32 %%t1, %%wid, 10;\n  add.u32 %%swc, %%scnt, %%t1;\n  shl.b32 %%t1, %%tx, 2;\n  add.u32 %%cz, %%scnt, %%t1;\n");
  if (has_v) E("  mov.u32 %%sxv, s_xv;\n");
}

/* The tile's digit starts by decoupled look-back (a onesweep pass: no per-pass histogram or scan),
 * thread tx for digit tx, its count in the tile %t8 and its local start %t10: the digit's global
 * start is row * n + (the row's keys of lower digits: an exclusive scan of gcounts, the whole row's
 * digit counts of this pass, made up front by ks_digits) + (its keys in the row's earlier tiles).
 * Each tile publishes per digit a word of status[tile][digit]: 0 not yet, 1 << 30 | its own count,
 * 2 << 30 | the inclusive count over tiles 0..it; a tile walks back over its predecessors' words,
 * adding own counts until it meets an inclusive one (waiting where a word is still 0), then
 * publishes its inclusive count. Tiles take their numbers in the order blocks start (an atomic
 * counter before gcounts), so every tile waited for is held by a running block. Leaves s_gd[tx] =
 * global start - local start. Uses %t1-%t6 (block_scan), %t12-%t21, %u6-%u8, %p6, %p9, %p10. */
static void look_back(kl_str *s) {
  E("L_lookback:\n  shr.u32 %%t12, %%sh, 3;\n  mad.lo.u32 %%t12, %%row, 4, %%t12;\n  shl.b32 %%t12, %%t12, 8;\n"
    "  add.u32 %%t12, %%t12, %%tx;\n  mul.wide.u32 %%u6, %%t12, 4;\n  add.u64 %%u6, %%u6, %%a_gcounts;\n"
    "  ld.global.u32 %%t13, [%%u6];\n");
  block_scan(s, "%t13", "%t14", "%t15");
  E("  mad.lo.u32 %%t16, %%row, %%T32, %%tile;\n  shl.b32 %%t16, %%t16, 8;\n  add.u32 %%t16, %%t16, %%tx;\n"
    "  mul.wide.u32 %%u7, %%t16, 4;\n  add.u64 %%u7, %%u7, %%a_status;\n  setp.eq.u32 %%p9, %%tile, 0;\n"
    "  selp.b32 %%t17, 0x80000000, 0x40000000, %%p9;\n  or.b32 %%t17, %%t17, %%t8;\n"
    "  st.volatile.global.u32 [%%u7], %%t17;\n  mov.u32 %%t18, 0;\n  @%%p9 bra L_lbdone;\n  mov.u64 %%u8, %%u7;\n"
    "L_lbnext:\n  sub.u64 %%u8, %%u8, 1024;\nL_lbspin:\n  ld.volatile.global.u32 %%t19, [%%u8];\n"
    "  shr.u32 %%t20, %%t19, 30;\n  setp.eq.u32 %%p10, %%t20, 0;\n  @%%p10 bra L_lbspin;\n"
    "  and.b32 %%t21, %%t19, 0x3fffffff;\n  add.u32 %%t18, %%t18, %%t21;\n  setp.eq.u32 %%p10, %%t20, 1;\n"
    "  @%%p10 bra L_lbnext;\n  add.u32 %%t17, %%t18, %%t8;\n  or.b32 %%t17, %%t17, 0x80000000;\n"
    "  st.volatile.global.u32 [%%u7], %%t17;\nL_lbdone:\n  mad.lo.u32 %%t19, %%row, %%n32, %%t14;\n"
    "  add.u32 %%t19, %%t19, %%t18;\n  sub.u32 %%t19, %%t19, %%t10;\n  shl.b32 %%t1, %%tx, 2;\n  add.u32 %%t2, %%sgd, %%t1;\n"
    "  st.shared.u32 [%%t2], %%t19;\n");
}

/* One stable counting pass inside a block over it items a thread: item i of the thread is
 * element wid*32*it + i*32 + lane of the block's run (keys %k<i>, values %v<i> with has_v); the
 * digit is (key >> %sh) & %bm. Afterwards element e of the run, in sorted order, is at s_xk[e]
 * (s_xv[e]), the block converged after a barrier. With tile_base, s_gd[d] holds (the global
 * position of the tile's first digit d, from the counts scan) - (its local start), for the
 * scatter; %gidx must then hold the counts index of digit 0 and %gstep the distance between
 * digits. Digits are recomputed rather than kept: registers are what limits the blocks a
 * multiprocessor holds. */
static void rank_pass(kl_str *s, int it, int tile_base, int has_v) {
  for (int w = 0; w < NW; w++) E("  st.shared.u32 [%%cz+%d], 0;\n", w * 1024);
  E("  bar.sync 0;\n");
  /* item i: the lanes holding its digit, from 8 ballots (one per digit bit: match.any.sync does
   * it in one instruction, but measured on an H200 its throughput made the passes 2-3x slower);
   * their highest lane adds their number to the warp's counter of that digit with an atomic, whose
   * old value it hands to the others (CUB's match ranking): no item waits for the previous one's
   * counter, and a warp's atomics on one counter land in the order of its instructions, which
   * keeps the ranks stable */
  for (int i = 0; i < it; i++) {
    E("  shr.b32 %%t1, %%k%d, %%sh;\n  and.b32 %%t1, %%t1, %%bm;\n  mov.u32 %%t2, -1;\n", i);
    for (int b = 0; b < 8; b++)
      E("  and.b32 %%bb, %%t1, %d;\n  setp.ne.u32 %%pb, %%bb, 0;\n  vote.sync.ballot.b32 %%bal, %%pb, -1;\n"
        "  @!%%pb not.b32 %%bal, %%bal;\n  and.b32 %%t2, %%t2, %%bal;\n",
        1 << b);
    E("  clz.b32 %%t3, %%t2;\n  sub.u32 %%t3, 31, %%t3;\n  setp.eq.u32 %%p7, %%t3, %%lane;\n  popc.b32 %%t4, %%t2;\n"
      "  shl.b32 %%t5, %%t1, 2;\n  add.u32 %%t5, %%swc, %%t5;\n  mov.u32 %%t6, 0;\n"
      "  @%%p7 atom.shared.add.u32 %%t6, [%%t5], %%t4;\n  shfl.sync.idx.b32 %%t6, %%t6, %%t3, 31, -1;\n"
      "  and.b32 %%t7, %%t2, %%ltm;\n  popc.b32 %%t7, %%t7;\n  add.u32 %%q%d, %%t6, %%t7;\n",
      i);
  }
  E("  bar.sync 0;\n  mov.u32 %%t8, 0;\n");
  for (int w = 0; w < NW; w++)
    E("  ld.shared.u32 %%t9, [%%cz+%d];\n  st.shared.u32 [%%cz+%d], %%t8;\n  add.u32 %%t8, %%t8, %%t9;\n", w * 1024,
      w * 1024);
  block_scan(s, "%t8", "%t10", "%t11");
  E("  shl.b32 %%t1, %%tx, 2;\n  add.u32 %%t2, %%slst, %%t1;\n  st.shared.u32 [%%t2], %%t10;\n");
  E("  bar.sync 0;\n");
  for (int i = 0; i < it; i++) {
    E("  shr.b32 %%t1, %%k%d, %%sh;\n  and.b32 %%t1, %%t1, %%bm;\n  shl.b32 %%t1, %%t1, 2;\n  add.u32 %%t2, %%slst, %%t1;\n"
      "  ld.shared.u32 %%t3, [%%t2];\n  add.u32 %%t2, %%swc, %%t1;\n  ld.shared.u32 %%t4, [%%t2];\n  add.u32 %%t3, %%t3, %%t4;\n"
      "  add.u32 %%t3, %%t3, %%q%d;\n  shl.b32 %%t3, %%t3, 2;\n  add.u32 %%t4, %%sxk, %%t3;\n  st.shared.u32 [%%t4], %%k%d;\n",
      i, i, i);
    if (has_v) E("  add.u32 %%t4, %%sxv, %%t3;\n  st.shared.u32 [%%t4], %%v%d;\n", i);
  }
  /* the tile's global digit starts, once the items are in shared memory (their registers free for
   * the look-back's) */
  if (tile_base) {
    E("  shl.b32 %%t1, %%tx, 2;\n  @%%plb bra L_lookback;\n");
    E("  setp.le.u32 %%p8, %%tx, %%bm;\n  mad.lo.u32 %%t2, %%tx, %%gstep, %%gidx;\n  mul.wide.u32 %%u6, %%t2, 4;\n"
      "  add.u64 %%u6, %%u6, %%a_counts;\n  mov.u32 %%t3, 0;\n  @%%p8 ld.global.u32 %%t3, [%%u6];\n"
      "  sub.u32 %%t3, %%t3, %%t10;\n  add.u32 %%t2, %%sgd, %%t1;\n  st.shared.u32 [%%t2], %%t3;\n  bra L_based;\n");
    look_back(s);
    E("L_based:\n");
  }
  E("  bar.sync 0;\n");
}

static void item_regs(kl_str *s, int it, int has_v) {
  E("  .reg .b32 %%k<%d>, %%q<%d>;\n  .reg .pred %%pi<%d>;\n", it, it, it);
  if (has_v) E("  .reg .b32 %%v<%d>;\n", it);
}

/* ---- the kernels ---- */

/* keys[i] = the word of the code of operand src at the row position perm[i] (the identity when
 * first, then also written to perm unless perm is 0); with flags, flags[row] |= 1 where a float
 * row holds -0 or a NaN other than canon (ks_fixup's work). */
static void k_encode(kl_str *s) {
  entry(s, "ks_encode", "src keys perm n inner total esz cls sign mask inf word first flags canon");
  narrow(s, "n inner total esz");
  key_setup(s);
  E("  .reg .pred %%pfirst, %%pperm, %%pst, %%pflag;\n  .reg .b32 %%pos, %%code;\n  .reg .b64 %%raw, %%addr, %%off;\n"
    "  setp.ne.u64 %%pfirst, %%a_first, 0;\n  setp.ne.u64 %%pperm, %%a_perm, 0;\n  and.pred %%pst, %%pfirst, %%pperm;\n"
    "  setp.ne.u64 %%pflag, %%a_flags, 0;\n  and.pred %%pflag, %%pflag, %%pcf;\n");
  grid_loop_open(s);
  split(s, "%i");
  E("  mul.wide.u32 %%off, %%i, 4;\n  mov.u32 %%pos, %%j;\n  add.u64 %%u6, %%a_perm, %%off;\n"
    "  @!%%pfirst ld.global.u32 %%pos, [%%u6];\n  @%%pst st.global.u32 [%%u6], %%j;\n");
  elem_addr(s, "%addr", "%a_src", "%esz32", "%pos");
  load_raw(s, "pz", "%addr", "%raw", "");
  encode(s, "%raw", "%code");
  E("  add.u64 %%u6, %%a_keys, %%off;\n  st.global.u32 [%%u6], %%code;\n"
    "  and.pred %%p9, %%pzero, %%pneg;\n  setp.ne.and.u64 %%p10, %%raw, %%a_canon, %%pnan;\n"
    "  or.pred %%p9, %%p9, %%p10;\n  and.pred %%p9, %%p9, %%pflag;\n  mul.wide.u32 %%u7, %%row, 4;\n"
    "  add.u64 %%u7, %%u7, %%a_flags;\n  @%%p9 red.global.or.b32 [%%u7], 1;\n");
  grid_loop_close(s);
}

/* The tile of block number b (a register): %row = b / T, %tile = b % T, %len its keys, %base its
 * first key's flat index, %tb its first key's position in the row (tiles of NT * it keys). */
static void tile_coords(kl_str *s, int it, const char *b) {
  E("  .reg .b32 %%row, %%tile, %%len, %%base, %%tb;\n"
    "  div.u32 %%row, %s, %%T32;\n  mul.lo.u32 %%t1, %%row, %%T32;\n  sub.u32 %%tile, %s, %%t1;\n"
    "  mul.lo.u32 %%tb, %%tile, %d;\n  sub.u32 %%len, %%n32, %%tb;\n  min.u32 %%len, %%len, %d;\n"
    "  mad.lo.u32 %%base, %%row, %%n32, %%tb;\n",
    b, b, NT * it, NT * it);
}

/* The mode parameter of the pass kernels: bit 0 (%penc) the keys are the codes of operand src
 * (rows contiguous: inner 1), encoded as they are read, the first pass of the first word; bit 1
 * (%pdec) the scatter writes values decoded from the codes (elements of esz bytes) instead of the
 * codes, the last pass of a one-operand sort; bit 2 (%pval) the values ride along from vin even in
 * the first pass (a 4-byte operand carried itself instead of the permutation). */
static void mode_preds(kl_str *s) {
  E("  .reg .pred %%penc, %%pdec, %%pval, %%pvload;\n  and.b64 %%u9, %%a_mode, 1;\n  setp.ne.u64 %%penc, %%u9, 0;\n"
    "  and.b64 %%u9, %%a_mode, 2;\n  setp.ne.u64 %%pdec, %%u9, 0;\n  and.b64 %%u9, %%a_mode, 4;\n"
    "  setp.ne.u64 %%pval, %%u9, 0;\n  not.pred %%pvload, %%penc;\n  or.pred %%pvload, %%pvload, %%pval;\n");
}

/* Item i's key in %k<i> (its validity %pi<i> set): the code at kin[%base + e], or, with %penc, the
 * encoded element of src there (the raw value in %raw); e = wb + i * step. Uses %t0-%t1, %u0-%u9. */
static void load_items(kl_str *s, int it, const char *wb, int step, const char *kin) {
  for (int i = 0; i < it; i++)
    E("  add.u32 %%t1, %s, %d;\n  setp.lt.u32 %%pi%d, %%t1, %%len;\n", wb, i * step, i);
  E("  @%%penc bra L_enc;\n");
  for (int i = 0; i < it; i++)
    E("  add.u32 %%t1, %s, %d;\n  add.u32 %%t1, %%t1, %%base;\n  mul.wide.u32 %%u8, %%t1, 4;\n  add.u64 %%u8, %%u8, %s;\n"
      "  mov.u32 %%k%d, -1;\n  @%%pi%d ld.global.u32 %%k%d, [%%u8];\n",
      wb, i * step, kin, i, i, i);
  E("  bra L_loaded;\nL_enc:\n");
  for (int i = 0; i < it; i++) {
    char guard[16];
    snprintf(guard, sizeof guard, "%%pi%d", i);
    E("  add.u32 %%t1, %s, %d;\n  add.u32 %%t1, %%t1, %%base;\n  mul.wide.u32 %%u8, %%t1, %%esz32;\n"
      "  add.u64 %%addr, %%u8, %%a_src;\n",
      wb, i * step);
    load_raw(s, "pz", "%addr", "%raw", guard);
    encode(s, "%raw", "%t1");
    E("  selp.b32 %%k%d, %%t1, -1, %%pi%d;\n", i, i);
    E("  and.pred %%p9, %%pzero, %%pneg;\n  setp.ne.and.u64 %%p10, %%raw, %%a_canon, %%pnan;\n  or.pred %%p9, %%p9, %%p10;\n"
      "  and.pred %%p9, %%p9, %%pflag;\n  and.pred %%p9, %%p9, %%pi%d;\n  @%%p9 red.global.or.b32 [%%fl], 1;\n",
      i);
  }
  E("L_loaded:\n");
}

/* counts[(row * B + d) * T + tile] = how many keys of the tile have digit d (B = 2^bits, T tiles
 * a row); with mode bit 0 the keys are operand src's codes, and flags[row] |= 1 where a float row
 * holds -0 or a NaN other than canon (ks_fixup's work), unless flags is 0. */
static void k_hist(kl_str *s, int it) {
  char name[32];
  snprintf(name, sizeof name, "ks_hist_%d", it);
  entry(s, name, "keys counts n T shift bits src esz cls sign mask inf word canon flags mode");
  narrow(s, "n T shift bits esz");
  key_setup(s);
  mode_preds(s);
  tile_coords(s, it, "%bx");
  E("  .shared .align 16 .b8 s_h[1024];\n  .reg .b32 %%bm, %%sh_h, %%hp, %%k<%d>;\n  .reg .pred %%pi<%d>, %%pflag;\n"
    "  .reg .b64 %%raw, %%addr, %%fl;\n  setp.ne.u64 %%pflag, %%a_flags, 0;\n  and.pred %%pflag, %%pflag, %%pcf;\n"
    "  mul.wide.u32 %%fl, %%row, 4;\n  add.u64 %%fl, %%fl, %%a_flags;\n"
    "  shl.b32 %%bm, 1, %%bits32;\n  sub.u32 %%bm, %%bm, 1;\n"
    "  mov.u32 %%sh_h, s_h;\n  shl.b32 %%t1, %%tx, 2;\n  add.u32 %%hp, %%sh_h, %%t1;\n  st.shared.u32 [%%hp], 0;\n"
    "  bar.sync 0;\n",
    it, it);
  load_items(s, it, "%tx", NT, "%a_keys");
  for (int i = 0; i < it; i++)
    E("  shr.b32 %%t2, %%k%d, %%shift32;\n  and.b32 %%t2, %%t2, %%bm;\n  shl.b32 %%t2, %%t2, 2;\n"
      "  add.u32 %%t2, %%t2, %%sh_h;\n  @%%pi%d red.shared.add.u32 [%%t2], 1;\n",
      i, i);
  E("  bar.sync 0;\n  setp.le.u32 %%p20, %%tx, %%bm;\n  @!%%p20 bra L_done;\n  ld.shared.u32 %%t3, [%%hp];\n"
    "  add.u32 %%t4, %%bm, 1;\n  mad.lo.u32 %%t4, %%row, %%t4, %%tx;\n  mad.lo.u32 %%t4, %%t4, %%T32, %%tile;\n"
    "  mul.wide.u32 %%u2, %%t4, 4;\n  add.u64 %%u2, %%u2, %%a_counts;\n  st.global.u32 [%%u2], %%t3;\n"
    "L_done:\n  ret;\n}\n\n");
}

/* gcounts[(row * 4 + p) * 256 + d] += how many keys of the rows have digit d in pass p (bits
 * 8p..8p+7 of the code), for every pass p < ceil(bits / 8) of a word: a onesweep sort's histograms,
 * one read of the keys for all passes (gcounts zeroed before). Each block takes every grid-th tile
 * (tiles of a row in order, rows in order), counting in shared memory and adding its counts to
 * gcounts when its next tile is another row's and at its end: few global atomics on the 1024
 * counters of a row (a block a tile measured 65 us for 10^7 keys on an H100). Unless status is 0,
 * each tile's status words of every pass (status + p * tiles KB) are zeroed for the scatters. Mode
 * bit 0 and flags as ks_hist. Passes below low are not counted (a sort that skips them: ks_runs). */
static void k_digits(kl_str *s, int it) {
  char name[32];
  snprintf(name, sizeof name, "ks_digits_%d", it);
  entry(s, name, "keys gcounts n T bits src esz cls sign mask inf word canon flags mode tiles status low");
  narrow(s, "n T bits esz tiles low");
  key_setup(s);
  mode_preds(s);
  E("  .shared .align 16 .b8 s_h[4096];\n  .reg .b32 %%sh_h, %%hp, %%np, %%vb, %%cur, %%k<%d>;\n"
    "  .reg .pred %%pi<%d>, %%pflag;\n  .reg .b32 %%row, %%tile, %%len, %%base, %%tb;\n"
    "  .reg .b64 %%raw, %%addr, %%fl;\n  setp.ne.u64 %%pflag, %%a_flags, 0;\n  and.pred %%pflag, %%pflag, %%pcf;\n"
    "  add.u32 %%np, %%bits32, 7;\n  shr.u32 %%np, %%np, 3;\n"
    "  mov.u32 %%sh_h, s_h;\n  shl.b32 %%t1, %%tx, 2;\n  add.u32 %%hp, %%sh_h, %%t1;\n  mov.u32 %%vb, %%bx;\n",
    it, it);
  /* (counters per warp, against contention, measured the same on an H100: 58 us for 10^7 keys) */
  for (int p = 0; p < 4; p++) E("  st.shared.u32 [%%hp+%d], 0;\n", 1024 * p);
  E("  div.u32 %%cur, %%vb, %%T32;\n  bar.sync 0;\n"
    "L_tile:\n  setp.ge.u32 %%p21, %%vb, %%tiles32;\n  div.u32 %%row, %%vb, %%T32;\n"
    "  setp.ne.or.u32 %%p21, %%row, %%cur, %%p21;\n  @!%%p21 bra L_same;\n");
  /* the counts so far are row cur's: added to gcounts, then zeroed */
  E("  bar.sync 0;\n  shl.b32 %%t4, %%cur, 10;\n  add.u32 %%t4, %%t4, %%tx;\n  mul.wide.u32 %%u2, %%t4, 4;\n"
    "  add.u64 %%u2, %%u2, %%a_gcounts;\n");
  for (int p = 0; p < 4; p++)
    E("  setp.gt.u32 %%p20, %%np, %d;\n  ld.shared.u32 %%t3, [%%hp+%d];\n  setp.ne.and.u32 %%p20, %%t3, 0, %%p20;\n"
      "  @%%p20 red.global.add.u32 [%%u2+%d], %%t3;\n  st.shared.u32 [%%hp+%d], 0;\n",
      p, 1024 * p, 1024 * p, 1024 * p);
  E("  bar.sync 0;\n  mov.u32 %%cur, %%row;\n  setp.ge.u32 %%p21, %%vb, %%tiles32;\n  @%%p21 bra L_done;\n"
    "L_same:\n  mul.lo.u32 %%t1, %%row, %%T32;\n  sub.u32 %%tile, %%vb, %%t1;\n"
    "  mul.lo.u32 %%tb, %%tile, %d;\n  sub.u32 %%len, %%n32, %%tb;\n  min.u32 %%len, %%len, %d;\n"
    "  mad.lo.u32 %%base, %%row, %%n32, %%tb;\n  mul.wide.u32 %%fl, %%row, 4;\n  add.u64 %%fl, %%fl, %%a_flags;\n",
    NT * it, NT * it);
  /* the tile's status words of every pass zeroed for the scatters' look-back (passes tiles * 1 KB apart) */
  E("  setp.ne.u64 %%p22, %%a_status, 0;\n  shl.b32 %%t1, %%vb, 8;\n  add.u32 %%t1, %%t1, %%tx;\n  mul.wide.u32 %%u3, %%t1, 4;\n"
    "  add.u64 %%u3, %%u3, %%a_status;\n  mul.wide.u32 %%u4, %%tiles32, 1024;\n");
  for (int p = 0; p < 4; p++)
    E("  setp.gt.and.u32 %%p23, %%np, %d, %%p22;\n  @%%p23 st.global.u32 [%%u3], 0;\n  add.u64 %%u3, %%u3, %%u4;\n", p);
  load_items(s, it, "%tx", NT, "%a_keys");
  for (int p = 0; p < 4; p++) {
    E("  setp.le.u32 %%p20, %%np, %d;\n  @%%p20 bra L_counted;\n  setp.gt.u32 %%p20, %%low32, %d;\n"
      "  @%%p20 bra L_pass%d;\n", p, p, p);
    for (int i = 0; i < it; i++)
      E("  shr.b32 %%t2, %%k%d, %d;\n  and.b32 %%t2, %%t2, 255;\n  shl.b32 %%t2, %%t2, 2;\n"
        "  add.u32 %%t2, %%t2, %%sh_h;\n  @%%pi%d red.shared.add.u32 [%%t2+%d], 1;\n",
        i, 8 * p, i, 1024 * p);
    E("L_pass%d:\n", p);
  }
  E("L_counted:\n  mov.u32 %%t1, %%nctaid.x;\n  add.u32 %%vb, %%vb, %%t1;\n  bra L_tile;\nL_done:\n  ret;\n}\n\n");
}

/* The exclusive scan of counts[0..C) in place, in three launches: ks_scan_up (block b sums its
 * chunk of NT * 16 into partials[b]), ks_scan_mid (one block scans partials[0..P) in place),
 * ks_scan_down (block b scans its chunk from partials[b]). In a scan thread t holds 16 consecutive
 * items: ks_scan_down moves its chunk through shared memory (coalesced global accesses, a padded
 * layout against bank conflicts); ks_scan_mid's partials are few. */
static void chunk_load(kl_str *s, const char *base, const char *limit, const char *arr) {
  E("  mov.u32 %%sum, 0;\n");
  for (int q = 0; q < 16; q++)
    E("  add.u32 %%t1, %s, %d;\n  setp.lt.u32 %%pc%d, %%t1, %s;\n  mul.wide.u32 %%u1, %%t1, 4;\n  add.u64 %%u1, %%u1, %s;\n"
      "  mov.u32 %%c%d, 0;\n  @%%pc%d ld.global.u32 %%c%d, [%%u1];\n  add.u32 %%sum, %%sum, %%c%d;\n",
      base, q, q, limit, arr, q, q, q, q);
}
static void chunk_store(kl_str *s, const char *base, const char *arr, const char *run) {
  for (int q = 0; q < 16; q++)
    E("  add.u32 %%t1, %s, %d;\n  mul.wide.u32 %%u1, %%t1, 4;\n  add.u64 %%u1, %%u1, %s;\n"
      "  @%%pc%d st.global.u32 [%%u1], %s;\n  add.u32 %s, %s, %%c%d;\n",
      base, q, arr, q, run, run, run, q);
}

/* Item q of the block's chunk in its striped place (q * NT + tx, %pc<q> whether it is below C):
 * its global address in %u1 and its padded shared address (i + i / 16 words) in %t2. */
static void striped_item(kl_str *s, int q) {
  E("  add.u32 %%t1, %%bbase, %d;\n  add.u32 %%t1, %%t1, %%tx;\n  setp.lt.u32 %%pc%d, %%t1, %%C32;\n"
    "  mul.wide.u32 %%u1, %%t1, 4;\n  add.u64 %%u1, %%u1, %%a_counts;\n  add.u32 %%t2, %%tx, %d;\n  shr.u32 %%t3, %%t2, 4;\n"
    "  add.u32 %%t2, %%t2, %%t3;\n  shl.b32 %%t2, %%t2, 2;\n  add.u32 %%t2, %%t2, %%sc;\n",
    q * NT, q, q * NT);
}

static void k_scan(kl_str *s) {
  const char *regs = "  .shared .align 16 .b8 s_ws[32];\n  .reg .b32 %sum, %base, %ex, %tot, %run, %c<16>;\n"
                     "  .reg .pred %pc<16>;\n";
  entry(s, "ks_scan_up", "counts partials C");
  narrow(s, "C");
  E("%s  .reg .b32 %%bbase;\n  shl.b32 %%bbase, %%bx, 12;\n  mov.u32 %%sum, 0;\n", regs);
  for (int q = 0; q < 16; q++) /* the sum needs no order: striped, coalesced loads */
    E("  add.u32 %%t1, %%bbase, %d;\n  add.u32 %%t1, %%t1, %%tx;\n  setp.lt.u32 %%pc%d, %%t1, %%C32;\n"
      "  mul.wide.u32 %%u1, %%t1, 4;\n  add.u64 %%u1, %%u1, %%a_counts;\n  mov.u32 %%c%d, 0;\n"
      "  @%%pc%d ld.global.u32 %%c%d, [%%u1];\n  add.u32 %%sum, %%sum, %%c%d;\n",
      q * NT, q, q, q, q, q);
  block_scan(s, "%sum", "%ex", "%tot");
  E("  setp.ne.u32 %%p20, %%tx, 0;\n  @%%p20 bra L_done;\n  mul.wide.u32 %%u2, %%bx, 4;\n"
    "  add.u64 %%u2, %%u2, %%a_partials;\n  st.global.u32 [%%u2], %%tot;\nL_done:\n  ret;\n}\n\n");

  entry(s, "ks_scan_mid", "partials P");
  narrow(s, "P");
  E("%s  .reg .b32 %%carry, %%cb;\n  mov.u32 %%carry, 0;\n  mov.u32 %%cb, 0;\n"
    "L_chunk:\n  setp.ge.u32 %%p20, %%cb, %%P32;\n  @%%p20 bra L_done;\n  shl.b32 %%t2, %%tx, 4;\n  add.u32 %%base, %%cb, %%t2;\n",
    regs);
  chunk_load(s, "%base", "%P32", "%a_partials");
  block_scan(s, "%sum", "%ex", "%tot");
  E("  add.u32 %%run, %%carry, %%ex;\n");
  chunk_store(s, "%base", "%a_partials", "%run");
  E("  add.u32 %%carry, %%carry, %%tot;\n  add.u32 %%cb, %%cb, %d;\n  bra L_chunk;\nL_done:\n  ret;\n}\n\n", NT * 16);

  entry(s, "ks_scan_down", "counts partials C");
  narrow(s, "C");
  E("%s  .shared .align 16 .b8 s_c[%d];\n  .reg .b32 %%bbase, %%sc, %%mine;\n  shl.b32 %%bbase, %%bx, 12;\n"
    "  mov.u32 %%sc, s_c;\n  mul.lo.u32 %%mine, %%tx, 68;\n  add.u32 %%mine, %%mine, %%sc;\n",
    regs, NT * 17 * 4);
  for (int q = 0; q < 16; q++) {
    striped_item(s, q);
    E("  mov.u32 %%t4, 0;\n  @%%pc%d ld.global.u32 %%t4, [%%u1];\n  st.shared.u32 [%%t2], %%t4;\n", q);
  }
  E("  bar.sync 0;\n  mov.u32 %%sum, 0;\n"); /* thread t's items: padded words 17 t .. 17 t + 15 */
  for (int q = 0; q < 16; q++) E("  ld.shared.u32 %%c%d, [%%mine+%d];\n  add.u32 %%sum, %%sum, %%c%d;\n", q, 4 * q, q);
  block_scan(s, "%sum", "%ex", "%tot");
  E("  mul.wide.u32 %%u2, %%bx, 4;\n  add.u64 %%u2, %%u2, %%a_partials;\n  ld.global.u32 %%run, [%%u2];\n"
    "  add.u32 %%run, %%run, %%ex;\n");
  for (int q = 0; q < 16; q++) E("  st.shared.u32 [%%mine+%d], %%run;\n  add.u32 %%run, %%run, %%c%d;\n", 4 * q, q);
  E("  bar.sync 0;\n");
  for (int q = 0; q < 16; q++) {
    striped_item(s, q);
    E("  ld.shared.u32 %%t4, [%%t2];\n  @%%pc%d st.global.u32 [%%u1], %%t4;\n", q);
  }
  E("  ret;\n}\n\n");
}

/* One radix pass over a tile (the block's): kout/vout[position] = kin/vin[i], stably by digit
 * (kin >> shift) & (2^bits - 1), positions from the scanned counts; has_v: values ride along (the
 * permutation; with mode bit 0 they start as the row positions unless bit 2 is set). Mode bits as
 * mode_preds says. */
static void k_scatter(kl_str *s, int it, int has_v) {
  char name[32];
  snprintf(name, sizeof name, "ks_scatter_%s_%d", has_v ? "kv" : "k", it);
  /* 16 items a thread in 80 registers: 3 blocks a multiprocessor (the kv scatter of a permutation
   * of 10^7 on an H100: 106 us a pass, against 115 us uncapped; 64, 72 and 96 were slower) */
  entry_with(s, name, "kin vin kout vout counts n T shift bits src esz cls sign mask inf word canon mode status gcounts",
             it == 16 ? ".maxnreg 80\n" : "");
  narrow(s, "n T shift bits esz");
  key_setup(s);
  mode_preds(s);
  /* with status (a onesweep pass, look_back): the tile is the block's number from the pass's
   * counter (the words 256 bytes before gcounts, one a pass), in the order blocks start; else the
   * block index */
  E("  .shared .align 4 .b8 s_tile[4];\n  .reg .b32 %%vb;\n  .reg .pred %%plb;\n  mov.u32 %%vb, %%bx;\n"
    "  setp.ne.u64 %%plb, %%a_status, 0;\n  @!%%plb bra L_numbered;\n  setp.eq.u32 %%p11, %%tx, 0;\n"
    "  shr.u32 %%t1, %%shift32, 3;\n  mul.wide.u32 %%u9, %%t1, 4;\n  add.u64 %%u9, %%u9, %%a_gcounts;\n"
    "  sub.u64 %%u9, %%u9, 256;\n  @%%p11 atom.global.add.u32 %%t1, [%%u9], 1;\n  mov.u32 %%t2, s_tile;\n"
    "  @%%p11 st.shared.u32 [%%t2], %%t1;\n  bar.sync 0;\n  ld.shared.u32 %%vb, [%%t2];\nL_numbered:\n");
  tile_coords(s, it, "%vb");
  rank_shared(s, NT * it, has_v);
  item_regs(s, it, has_v);
  E("  .reg .b32 %%wb, %%gidx, %%gstep;\n  .reg .b64 %%raw, %%addr, %%fl;\n  .reg .pred %%pj, %%pflag;\n"
    "  setp.ne.u64 %%pflag, %%a_cls, %%a_cls;\n" /* (no flags here) */
    "  mov.u32 %%sh, %%shift32;\n  shl.b32 %%bm, 1, %%bits32;\n  sub.u32 %%bm, %%bm, 1;\n"
    "  mul.lo.u32 %%wb, %%wid, %d;\n  add.u32 %%wb, %%wb, %%lane;\n"
    "  add.u32 %%t1, %%bm, 1;\n  mul.lo.u32 %%gidx, %%row, %%t1;\n  mul.lo.u32 %%gidx, %%gidx, %%T32;\n"
    "  add.u32 %%gidx, %%gidx, %%tile;\n  mov.u32 %%gstep, %%T32;\n",
    32 * it);
  load_items(s, it, "%wb", 32, "%a_kin");
  for (int i = 0; has_v && i < it; i++) /* the values: vin's, or the row positions */
    E("  add.u32 %%t1, %%wb, %d;\n  add.u32 %%v%d, %%t1, %%tb;\n  add.u32 %%t1, %%t1, %%base;\n  mul.wide.u32 %%u1, %%t1, 4;\n"
      "  add.u64 %%u2, %%u1, %%a_vin;\n  and.pred %%p2, %%pi%d, %%pvload;\n"
      "  @%%p2 ld.global.u32 %%v%d, [%%u2];\n",
      i * 32, i, i, i);
  rank_pass(s, it, 1, has_v);
  for (int i = 0; i < it; i++) {
    E("  add.u32 %%t11, %%tx, %d;\n  setp.lt.u32 %%pj, %%t11, %%len;\n  @!%%pj bra L_done;\n  shl.b32 %%t12, %%t11, 2;\n"
      "  add.u32 %%t3, %%sxk, %%t12;\n  ld.shared.u32 %%t13, [%%t3];\n  shr.b32 %%t5, %%t13, %%sh;\n  and.b32 %%t5, %%t5, %%bm;\n"
      "  shl.b32 %%t5, %%t5, 2;\n  add.u32 %%t5, %%t5, %%sgd;\n  ld.shared.u32 %%t6, [%%t5];\n  add.u32 %%t14, %%t6, %%t11;\n"
      "  @%%pdec bra L_dec%d;\n  mul.wide.u32 %%u1, %%t14, 4;\n  add.u64 %%u2, %%u1, %%a_kout;\n  st.global.u32 [%%u2], %%t13;\n"
      "  bra L_kept%d;\nL_dec%d:\n",
      i * NT, i, i, i);
    decode(s, "%t13", "%raw");
    E("  mul.wide.u32 %%u8, %%t14, %%esz32;\n  add.u64 %%addr, %%u8, %%a_kout;\n");
    store_raw(s, "pz", "%addr", "%raw", "");
    E("L_kept%d:\n", i);
    if (has_v)
      E("  add.u32 %%t3, %%sxv, %%t12;\n  ld.shared.u32 %%t4, [%%t3];\n  mul.wide.u32 %%u1, %%t14, 4;\n"
        "  add.u64 %%u2, %%u1, %%a_vout;\n  st.global.u32 [%%u2], %%t4;\n");
  }
  E("L_done:\n  ret;\n}\n\n");
}

/* A whole row (the block's: bx) of at most NT * it elements in one block: the word of operand
 * src's codes at positions pin[row] (the identity when pin is 0) sorted stably over its low bits
 * bits, 8 at a time; pout[row] = the positions in sorted order (unless pout is 0) and, unless gdst
 * is 0, gdst's row = gsrc's row gathered through them (elements of gesz bytes). */
static void k_small(kl_str *s, int it) {
  char name[32];
  snprintf(name, sizeof name, "ks_small_%d", it);
  entry(s, name, "src pin pout n inner esz cls sign mask inf word bits gsrc gdst gesz");
  narrow(s, "n inner esz bits gesz");
  key_setup(s);
  size_preds(s, "pg", "gesz");
  rank_shared(s, NT * it, 1);
  item_regs(s, it, 1);
  E("  .reg .b32 %%row, %%o, %%ii, %%wb, %%rbase, %%pos;\n  .reg .b64 %%raw, %%addr;\n  .reg .pred %%ppin, %%ppout, %%pgd;\n"
    "  setp.ne.u64 %%ppin, %%a_pin, 0;\n  setp.ne.u64 %%ppout, %%a_pout, 0;\n  setp.ne.u64 %%pgd, %%a_gdst, 0;\n"
    "  mov.u32 %%row, %%bx;\n  div.u32 %%o, %%row, %%inner32;\n  mul.lo.u32 %%t1, %%o, %%inner32;\n"
    "  sub.u32 %%ii, %%row, %%t1;\n  mul.lo.u32 %%rbase, %%row, %%n32;\n  mul.lo.u32 %%wb, %%wid, %d;\n"
    "  add.u32 %%wb, %%wb, %%lane;\n",
    32 * it);
  for (int i = 0; i < it; i++) {
    E("  add.u32 %%t8, %%wb, %d;\n  setp.lt.u32 %%p12, %%t8, %%n32;\n  and.pred %%p13, %%p12, %%ppin;\n"
      "  mov.u32 %%pos, %%t8;\n  add.u32 %%t9, %%rbase, %%t8;\n  mul.wide.u32 %%u8, %%t9, 4;\n  add.u64 %%u8, %%u8, %%a_pin;\n"
      "  @%%p13 ld.global.u32 %%pos, [%%u8];\n  mov.u32 %%v%d, %%pos;\n",
      i * 32, i);
    elem_addr(s, "%addr", "%a_src", "%esz32", "%pos");
    load_raw(s, "pz", "%addr", "%raw", "%p12");
    encode(s, "%raw", "%t9");
    E("  selp.b32 %%k%d, %%t9, -1, %%p12;\n", i);
  }
  E("  mov.u32 %%sh, 0;\nL_pass:\n  sub.u32 %%t1, %%bits32, %%sh;\n  min.u32 %%t1, %%t1, 8;\n  shl.b32 %%bm, 1, %%t1;\n"
    "  sub.u32 %%bm, %%bm, 1;\n");
  rank_pass(s, it, 0, 1);
  for (int i = 0; i < it; i++)
    E("  add.u32 %%t1, %%wb, %d;\n  shl.b32 %%t1, %%t1, 2;\n  add.u32 %%t2, %%sxk, %%t1;\n  ld.shared.u32 %%k%d, [%%t2];\n"
      "  add.u32 %%t2, %%sxv, %%t1;\n  ld.shared.u32 %%v%d, [%%t2];\n",
      i * 32, i, i);
  E("  bar.sync 0;\n  add.u32 %%sh, %%sh, 8;\n  setp.lt.u32 %%p1, %%sh, %%bits32;\n  @%%p1 bra L_pass;\n");
  E("  .reg .b64 %%to;\n");
  for (int i = 0; i < it; i++) {
    char v[16];
    snprintf(v, sizeof v, "%%v%d", i);
    E("  add.u32 %%t8, %%wb, %d;\n  setp.lt.u32 %%p12, %%t8, %%n32;\n  and.pred %%p13, %%p12, %%ppout;\n"
      "  add.u32 %%t9, %%rbase, %%t8;\n  mul.wide.u32 %%u8, %%t9, 4;\n  add.u64 %%u8, %%u8, %%a_pout;\n"
      "  @%%p13 st.global.u32 [%%u8], %s;\n  and.pred %%p14, %%p12, %%pgd;\n",
      i * 32, v);
    elem_addr(s, "%addr", "%a_gsrc", "%gesz32", v);
    elem_addr(s, "%to", "%a_gdst", "%gesz32", "%t8");
    load_raw(s, "pg", "%addr", "%raw", "%p14");
    store_raw(s, "pg", "%to", "%raw", "%p14");
  }
  E("  ret;\n}\n\n");
}

/* dst at row position j = src at row position perm[i] (i = row * n + j), elements of esz bytes. */
static void k_gather(kl_str *s) {
  entry(s, "ks_gather", "src dst perm n inner total esz");
  narrow(s, "n inner total esz");
  size_preds(s, "pz", "esz");
  E("  .reg .b32 %%pos;\n  .reg .b64 %%raw, %%from, %%to;\n");
  grid_loop_open(s);
  split(s, "%i");
  E("  mul.wide.u32 %%u6, %%i, 4;\n  add.u64 %%u6, %%u6, %%a_perm;\n  ld.global.u32 %%pos, [%%u6];\n");
  elem_addr(s, "%from", "%a_src", "%esz32", "%pos");
  elem_addr(s, "%to", "%a_dst", "%esz32", "%j");
  load_raw(s, "pz", "%from", "%raw", "");
  store_raw(s, "pz", "%to", "%raw", "");
  grid_loop_close(s);
}

/* dst at row position j = perm[i] (an integer iota operand's output), esz bytes. */
static void k_iota(kl_str *s) {
  entry(s, "ks_iota", "perm dst n inner total esz");
  narrow(s, "n inner total esz");
  size_preds(s, "pz", "esz");
  E("  .reg .b64 %%raw, %%to;\n");
  grid_loop_open(s);
  split(s, "%i");
  E("  mul.wide.u32 %%u6, %%i, 4;\n  add.u64 %%u6, %%u6, %%a_perm;\n  ld.global.u32 %%t3, [%%u6];\n"
    "  cvt.u64.u32 %%raw, %%t3;\n");
  elem_addr(s, "%to", "%a_dst", "%esz32", "%j");
  store_raw(s, "pz", "%to", "%raw", "");
  grid_loop_close(s);
}

/* dst at row position j = the value of code keys[i] (a one-operand sort). */
static void k_decode(kl_str *s) {
  entry(s, "ks_decode", "keys dst n inner total esz cls sign mask inf word canon");
  narrow(s, "n inner total esz");
  key_setup(s);
  E("  .reg .b64 %%raw, %%to;\n");
  grid_loop_open(s);
  split(s, "%i");
  E("  mul.wide.u32 %%u6, %%i, 4;\n  add.u64 %%u6, %%u6, %%a_keys;\n  ld.global.u32 %%t3, [%%u6];\n");
  decode(s, "%t3", "%raw");
  elem_addr(s, "%to", "%a_dst", "%esz32", "%j");
  store_raw(s, "pz", "%to", "%raw", "");
  grid_loop_close(s);
}

/* For a row (the block's) whose flag is set: its run of zeros and its run of NaNs in sorted dst
 * (found by binary search over the codes) rewritten with src's zeros and NaNs in their original
 * order, bits and all: what a one-operand float sort's decoding loses (-0, NaN payloads). */
static void k_fixup(kl_str *s) {
  entry(s, "ks_fixup", "src dst flags n inner esz cls sign mask inf word canon");
  narrow(s, "n inner esz sign mask");
  key_setup(s);
  E("  .shared .align 16 .b8 s_fz[%d];\n  .shared .align 16 .b8 s_fn[%d];\n", NW * 4, NW * 4);
  E("  .reg .b32 %%row, %%o, %%ii, %%lo, %%hi, %%mid, %%code, %%z0, %%q0, %%zc, %%nc, %%base, %%j;\n"
    "  .reg .b32 %%bz, %%bn, %%wz, %%wn, %%tz, %%tn, %%sfz, %%sfn;\n  .reg .b64 %%raw, %%addr;\n"
    "  .reg .pred %%pv, %%pzz, %%pnn;\n"
    "  mov.u32 %%row, %%bx;\n  mul.wide.u32 %%u6, %%row, 4;\n  add.u64 %%u6, %%u6, %%a_flags;\n"
    "  ld.global.u32 %%t3, [%%u6];\n  setp.eq.u32 %%p20, %%t3, 0;\n  @%%p20 bra L_done;\n"
    "  div.u32 %%o, %%row, %%inner32;\n  mul.lo.u32 %%t1, %%o, %%inner32;\n  sub.u32 %%ii, %%row, %%t1;\n");
  const char *target[2] = {"%sign32", "%mask32"}, *res[2] = {"%z0", "%q0"};
  for (int b = 0; b < 2; b++) { /* lower bounds of the zero and the NaN codes */
    E("  mov.u32 %%lo, 0;\n  mov.u32 %%hi, %%n32;\nL_bs%d:\n  setp.ge.u32 %%p20, %%lo, %%hi;\n  @%%p20 bra L_bs%d_end;\n"
      "  add.u32 %%mid, %%lo, %%hi;\n  shr.u32 %%mid, %%mid, 1;\n",
      b, b);
    elem_addr(s, "%addr", "%a_dst", "%esz32", "%mid");
    load_raw(s, "pz", "%addr", "%raw", "");
    encode(s, "%raw", "%code");
    E("  setp.lt.u32 %%p20, %%code, %s;\n  add.u32 %%t3, %%mid, 1;\n  @%%p20 mov.u32 %%lo, %%t3;\n"
      "  @!%%p20 mov.u32 %%hi, %%mid;\n  bra L_bs%d;\nL_bs%d_end:\n  mov.u32 %s, %%lo;\n",
      target[b], b, b, res[b]);
  }
  E("  mov.u32 %%zc, 0;\n  mov.u32 %%nc, 0;\n  mov.u32 %%base, 0;\n  mov.u32 %%sfz, s_fz;\n  mov.u32 %%sfn, s_fn;\n"
    "L_walk:\n  setp.ge.u32 %%p20, %%base, %%n32;\n  @%%p20 bra L_done;\n  add.u32 %%j, %%base, %%tx;\n"
    "  setp.lt.u32 %%pv, %%j, %%n32;\n");
  elem_addr(s, "%addr", "%a_src", "%esz32", "%j");
  load_raw(s, "pz", "%addr", "%raw", "%pv");
  encode(s, "%raw", "%code");
  E("  and.pred %%pzz, %%pzero, %%pv;\n  and.pred %%pnn, %%pnan, %%pv;\n"
    "  vote.sync.ballot.b32 %%bz, %%pzz, -1;\n  vote.sync.ballot.b32 %%bn, %%pnn, -1;\n"
    "  setp.eq.u32 %%p21, %%lane, 0;\n  shl.b32 %%t3, %%wid, 2;\n  popc.b32 %%t4, %%bz;\n  add.u32 %%t5, %%sfz, %%t3;\n"
    "  @%%p21 st.shared.u32 [%%t5], %%t4;\n  popc.b32 %%t4, %%bn;\n  add.u32 %%t5, %%sfn, %%t3;\n"
    "  @%%p21 st.shared.u32 [%%t5], %%t4;\n  bar.sync 0;\n  mov.u32 %%wz, 0;\n  mov.u32 %%wn, 0;\n  mov.u32 %%tz, 0;\n"
    "  mov.u32 %%tn, 0;\n");
  for (int w = 0; w < NW; w++)
    E("  setp.gt.u32 %%p21, %%wid, %d;\n  ld.shared.u32 %%t4, [%%sfz+%d];\n  add.u32 %%tz, %%tz, %%t4;\n"
      "  @%%p21 add.u32 %%wz, %%wz, %%t4;\n  ld.shared.u32 %%t4, [%%sfn+%d];\n  add.u32 %%tn, %%tn, %%t4;\n"
      "  @%%p21 add.u32 %%wn, %%wn, %%t4;\n",
      w, 4 * w, 4 * w);
  E("  bar.sync 0;\n  and.b32 %%t6, %%bz, %%ltm;\n  popc.b32 %%t6, %%t6;\n  add.u32 %%t6, %%t6, %%wz;\n"
    "  add.u32 %%t6, %%t6, %%zc;\n  add.u32 %%t6, %%t6, %%z0;\n  and.b32 %%t7, %%bn, %%ltm;\n  popc.b32 %%t7, %%t7;\n"
    "  add.u32 %%t7, %%t7, %%wn;\n  add.u32 %%t7, %%t7, %%nc;\n  add.u32 %%t7, %%t7, %%q0;\n"
    "  selp.b32 %%t6, %%t6, %%t7, %%pzz;\n  or.pred %%p22, %%pzz, %%pnn;\n");
  elem_addr(s, "%addr", "%a_dst", "%esz32", "%t6");
  store_raw(s, "pz", "%addr", "%raw", "%p22");
  E("  add.u32 %%zc, %%zc, %%tz;\n  add.u32 %%nc, %%nc, %%tn;\n  add.u32 %%base, %%base, %d;\n  bra L_walk;\n"
    "L_done:\n  ret;\n}\n\n",
    NT);
}

/* The last digit of a sort by 32-bit codes whose passes sorted the rows (contiguous, of n) by the
 * codes' high 24 bits: each run of equal high bits put in order of the low 8, stably, from
 * keys/vals into kout/vout (kout 0: not written). A block takes RUN_TILE elements, its keys and
 * RUN_HALO more each side in shared memory (runs reaching further read global memory). A run of
 * at most RUN_MAX codes (random keys': about 1.6 long at 10^7) is done by its elements, each
 * counting where it goes among its run's (pos = i - the earlier ones with a larger low byte + the
 * later ones with a smaller); a longer one serially by its first element, by a counting sort whose
 * 256 counters are in free (keys' free buffer, the run's own stretch: it is longer than 256). */
#define RUN_MAX 256
#define RUN_TILE (NT * 16)
#define RUN_HALO 64
static void k_runs(kl_str *s) {
  entry(s, "ks_runs", "keys vals kout vout n total free");
  narrow(s, "n total");
  E("  .shared .align 16 .b8 s_k[%d];\n  .shared .align 16 .b8 s_v[%d];\n"
    "  .reg .b32 %%rs, %%re, %%k, %%h, %%d, %%pos, %%cnt, %%bc, %%kj, %%e, %%run, %%i, %%j, %%row, %%q, %%lo, %%hi, %%sk;\n"
    "  .reg .b32 %%rA, %%rB, %%rC, %%jmin, %%jmax, %%pb, %%pf, %%hb, %%hl, %%first, %%last;\n"
    "  .reg .pred %%pv, %%palive, %%pst, %%pgen;\n"
    "  .reg .pred %%pko;\n  setp.ne.u64 %%pko, %%a_kout, 0;\n  mov.u32 %%sk, s_k;\n"
    "  mul.lo.u32 %%t1, %%bx, %d;\n  sub.u32 %%lo, %%t1, %d;\n  setp.lt.u32 %%p1, %%t1, %d;\n  @%%p1 mov.u32 %%lo, 0;\n"
    "  add.u32 %%hi, %%t1, %d;\n  min.u32 %%hi, %%hi, %%total32;\n"
    /* the tile's rows (rows are longer than a tile: it meets two at most): rA, rB, their ends rB, rC */
    "  div.u32 %%t2, %%t1, %%n32;\n  mul.lo.u32 %%rA, %%t2, %%n32;\n  add.u32 %%rB, %%rA, %%n32;\n  add.u32 %%rC, %%rB, %%n32;\n",
    (RUN_TILE + 2 * RUN_HALO) * 4, RUN_TILE * 4, RUN_TILE, RUN_HALO, RUN_HALO, RUN_TILE + RUN_HALO);
  /* the keys of [lo, hi) into s_k and the tile's values into s_v (loaded late, each would stall its
   * element), coalesced, every load of a batch issued before the first store */
  E("  .reg .b32 %%ld<17>;\n  shl.b32 %%t7, %%tx, 2;\n  add.u32 %%t9, %%t7, %%sk;\n  mov.u32 %%t8, s_v;\n  add.u32 %%t8, %%t7, %%t8;\n");
  for (int q = 0; q < RUN_TILE / NT; q++)
    E("  add.u32 %%j, %%t1, %d;\n  add.u32 %%j, %%j, %%tx;\n  setp.lt.u32 %%p%d, %%j, %%total32;\n  mul.wide.u32 %%u3, %%j, 4;\n"
      "  add.u64 %%u3, %%u3, %%a_vals;\n  @%%p%d ld.global.u32 %%ld%d, [%%u3];\n",
      q * NT, 6 + q, 6 + q, q);
  for (int q = 0; q < RUN_TILE / NT; q++) E("  @%%p%d st.shared.u32 [%%t8+%d], %%ld%d;\n", 6 + q, q * NT * 4, q);
  for (int q = 0; q * NT < RUN_TILE + 2 * RUN_HALO; q++)
    E("  add.u32 %%j, %%lo, %d;\n  add.u32 %%j, %%j, %%tx;\n  setp.lt.u32 %%p%d, %%j, %%hi;\n  mul.wide.u32 %%u3, %%j, 4;\n"
      "  add.u64 %%u3, %%u3, %%a_keys;\n  @%%p%d ld.global.u32 %%ld%d, [%%u3];\n",
      q * NT, 6 + q, 6 + q, q);
  for (int q = 0; q * NT < RUN_TILE + 2 * RUN_HALO; q++) E("  @%%p%d st.shared.u32 [%%t9+%d], %%ld%d;\n", 6 + q, q * NT * 4, q);
  E("  bar.sync 0;\n  mov.u32 %%q, 0;\n"
    "L_elem:\n  mul.lo.u32 %%i, %%bx, %d;\n  mad.lo.u32 %%i, %%q, %d, %%i;\n  add.u32 %%i, %%i, %%tx;\n"
    "  setp.lt.u32 %%pv, %%i, %%total32;\n",
    RUN_TILE, NT);
  /* The common case first: the element's run found in s_k, within RUN_MAX each side and no
   * longer than RUN_MAX. The high bits sorted, the codes tell it all: an earlier code is the
   * run's when at least its first (hb), a later one when at most its last (hl), and among the
   * run's the low bytes compare as the codes do. The warp steps out both ways together (a step
   * while any lane's run goes on: lanes on loops of their own ran a third of a warp wide), every
   * lane through every element (pv: the element exists). Anything else (the run reaching past
   * s_k, or long: pgen) goes the general way below, from the start. */
  E("  setp.ge.u32 %%p1, %%i, %%rB;\n  selp.b32 %%rs, %%rB, %%rA, %%p1;\n  selp.b32 %%re, %%rC, %%rB, %%p1;\n"
    "  max.u32 %%jmin, %%rs, %%lo;\n  sub.u32 %%t2, %%i, %d;\n  setp.ge.u32 %%p1, %%i, %d;\n  @%%p1 max.u32 %%jmin, %%jmin, %%t2;\n"
    "  sub.u32 %%jmax, %%re, 1;\n  sub.u32 %%t2, %%hi, 1;\n  min.u32 %%jmax, %%jmax, %%t2;\n  add.u32 %%t2, %%i, %d;\n"
    "  min.u32 %%jmax, %%jmax, %%t2;\n  sub.u32 %%pb, %%i, %%lo;\n  shl.b32 %%pb, %%pb, 2;\n  add.u32 %%pb, %%pb, %%sk;\n"
    "  mov.u32 %%pf, %%pb;\n  mov.u32 %%k, 0;\n  @%%pv ld.shared.u32 %%k, [%%pb];\n  and.b32 %%hb, %%k, 0xFFFFFF00;\n"
    "  or.b32 %%hl, %%hb, 255;\n  mov.u32 %%pos, %%i;\n  mov.u32 %%j, %%i;\n  mov.u32 %%first, %%i;\n  mov.u32 %%last, %%i;\n"
    "  mov.pred %%palive, %%pv;\n  setp.ne.u32 %%pgen, %%tx, %%tx;\n"
    "L_fb:\n  setp.gt.and.u32 %%pst, %%j, %%jmin, %%palive;\n  not.pred %%p3, %%pst;\n  and.pred %%p3, %%p3, %%palive;\n"
    "  setp.ne.and.u32 %%p3, %%j, %%rs, %%p3;\n  or.pred %%pgen, %%pgen, %%p3;\n"
    "  @%%pst sub.u32 %%j, %%j, 1;\n  @%%pst sub.u32 %%pb, %%pb, 4;\n  @%%pst ld.shared.u32 %%kj, [%%pb];\n"
    "  setp.ge.and.u32 %%palive, %%kj, %%hb, %%pst;\n  setp.gt.and.u32 %%p2, %%kj, %%k, %%palive;\n"
    "  @%%p2 sub.u32 %%pos, %%pos, 1;\n  @%%palive mov.u32 %%first, %%j;\n"
    "  vote.sync.ballot.b32 %%t5, %%palive, -1;\n  setp.ne.u32 %%p2, %%t5, 0;\n  @%%p2 bra L_fb;\n"
    "  mov.u32 %%j, %%i;\n  mov.pred %%palive, %%pv;\n  sub.u32 %%t6, %%re, 1;\n"
    "L_ff:\n  setp.lt.and.u32 %%pst, %%j, %%jmax, %%palive;\n  not.pred %%p3, %%pst;\n  and.pred %%p3, %%p3, %%palive;\n"
    "  setp.ne.and.u32 %%p3, %%j, %%t6, %%p3;\n  or.pred %%pgen, %%pgen, %%p3;\n"
    "  @%%pst add.u32 %%j, %%j, 1;\n  @%%pst add.u32 %%pf, %%pf, 4;\n  @%%pst ld.shared.u32 %%kj, [%%pf];\n"
    "  setp.le.and.u32 %%palive, %%kj, %%hl, %%pst;\n  setp.lt.and.u32 %%p2, %%kj, %%k, %%palive;\n"
    "  @%%p2 add.u32 %%pos, %%pos, 1;\n  @%%palive mov.u32 %%last, %%j;\n"
    "  vote.sync.ballot.b32 %%t5, %%palive, -1;\n  setp.ne.u32 %%p2, %%t5, 0;\n  @%%p2 bra L_ff;\n"
    "  sub.u32 %%t2, %%last, %%first;\n  setp.ge.u32 %%p3, %%t2, %d;\n  or.pred %%pgen, %%pgen, %%p3;\n"
    "  @!%%pv bra L_next;\n  @%%pgen bra L_general;\n"
    "  shl.b32 %%t3, %%q, %d;\n  add.u32 %%t3, %%t3, %%tx;\n  shl.b32 %%t3, %%t3, 2;\n  mov.u32 %%t4, s_v;\n  add.u32 %%t3, %%t3, %%t4;\n"
    "  ld.shared.u32 %%t3, [%%t3];\n  mul.wide.u32 %%u5, %%pos, 4;\n  add.u64 %%u6, %%u5, %%a_vout;\n  st.global.u32 [%%u6], %%t3;\n"
    "  add.u64 %%u6, %%u5, %%a_kout;\n  @%%pko st.global.u32 [%%u6], %%k;\n  bra L_next;\nL_general:\n",
    RUN_MAX, RUN_MAX, RUN_MAX, RUN_MAX, 8 /* log2 NT */);
  /* the code at j in %kj (from s_k when j is in [lo, hi)), branching to out when j's high bits are another run's */
#define RUN_LOAD(out) "  setp.ge.u32 %%p3, %%j, %%lo;\n  setp.lt.and.u32 %%p3, %%j, %%hi, %%p3;\n  sub.u32 %%t7, %%j, %%lo;\n" \
                      "  shl.b32 %%t7, %%t7, 2;\n  add.u32 %%t7, %%t7, %%sk;\n  @%%p3 ld.shared.u32 %%kj, [%%t7];\n" \
                      "  mul.wide.u32 %%u3, %%j, 4;\n  add.u64 %%u3, %%u3, %%a_keys;\n  @!%%p3 ld.global.u32 %%kj, [%%u3];\n" \
                      "  shr.u32 %%t1, %%kj, 8;\n  setp.ne.u32 %%p1, %%t1, %%h;\n  @%%p1 bra " out ";\n"
  E("  div.u32 %%row, %%i, %%n32;\n  mul.lo.u32 %%rs, %%row, %%n32;\n  add.u32 %%re, %%rs, %%n32;\n"
    "  mul.wide.u32 %%u1, %%i, 4;\n  mov.u32 %%j, %%i;\n" RUN_LOAD("L_self") "L_self:\n  mov.u32 %%k, %%kj;\n"
    "  shr.u32 %%h, %%k, 8;\n  and.b32 %%d, %%k, 255;\n  mov.u32 %%pos, %%i;\n  mov.u32 %%cnt, 0;\n  mov.u32 %%bc, -1;\n"
    "L_back:\n  setp.le.u32 %%p1, %%j, %%rs;\n  @%%p1 bra L_bend;\n  sub.u32 %%j, %%j, 1;\n" RUN_LOAD("L_bend")
    "  add.u32 %%cnt, %%cnt, 1;\n  setp.ge.u32 %%p1, %%cnt, %d;\n  @%%p1 bra L_long;\n"
    "  and.b32 %%t2, %%kj, 255;\n  setp.gt.u32 %%p2, %%t2, %%d;\n  @%%p2 sub.u32 %%pos, %%pos, 1;\n  bra L_back;\n"
    "L_bend:\n  mov.u32 %%bc, %%cnt;\n  mov.u32 %%j, %%i;\n"
    "L_fwd:\n  add.u32 %%j, %%j, 1;\n  setp.ge.u32 %%p1, %%j, %%re;\n  @%%p1 bra L_short;\n" RUN_LOAD("L_short")
    "  add.u32 %%cnt, %%cnt, 1;\n  setp.ge.u32 %%p1, %%cnt, %d;\n  @%%p1 bra L_long;\n"
    "  and.b32 %%t2, %%kj, 255;\n  setp.lt.u32 %%p2, %%t2, %%d;\n  @%%p2 add.u32 %%pos, %%pos, 1;\n  bra L_fwd;\n"
    "L_short:\n  add.u64 %%u4, %%u1, %%a_vals;\n  ld.global.u32 %%t3, [%%u4];\n  mul.wide.u32 %%u5, %%pos, 4;\n"
    "  add.u64 %%u6, %%u5, %%a_vout;\n  st.global.u32 [%%u6], %%t3;\n  add.u64 %%u6, %%u5, %%a_kout;\n"
    "  @%%pko st.global.u32 [%%u6], %%k;\n  bra L_next;\n",
    RUN_MAX, RUN_MAX);
  /* a long run: its first element counts its low bytes, scans the counts, places the run */
  E("L_long:\n  setp.ne.u32 %%p1, %%bc, 0;\n  @%%p1 bra L_next;\n  mul.wide.u32 %%u7, %%i, 4;\n  add.u64 %%u7, %%u7, %%a_free;\n"
    "  mov.u32 %%t4, 0;\nL_hz:\n  mul.wide.u32 %%u8, %%t4, 4;\n  add.u64 %%u8, %%u8, %%u7;\n  st.global.u32 [%%u8], 0;\n"
    "  add.u32 %%t4, %%t4, 1;\n  setp.lt.u32 %%p1, %%t4, 256;\n  @%%p1 bra L_hz;\n  mov.u32 %%j, %%i;\n"
    "L_hc:\n  setp.ge.u32 %%p1, %%j, %%re;\n  @%%p1 bra L_hcend;\n" RUN_LOAD("L_hcend")
    "  and.b32 %%t2, %%kj, 255;\n  mul.wide.u32 %%u8, %%t2, 4;\n  add.u64 %%u8, %%u8, %%u7;\n  ld.global.u32 %%t3, [%%u8];\n"
    "  add.u32 %%t3, %%t3, 1;\n  st.global.u32 [%%u8], %%t3;\n  add.u32 %%j, %%j, 1;\n  bra L_hc;\n"
    "L_hcend:\n  mov.u32 %%e, %%j;\n  mov.u32 %%run, %%i;\n  mov.u32 %%t4, 0;\n"
    "L_hs:\n  mul.wide.u32 %%u8, %%t4, 4;\n  add.u64 %%u8, %%u8, %%u7;\n  ld.global.u32 %%t3, [%%u8];\n"
    "  st.global.u32 [%%u8], %%run;\n  add.u32 %%run, %%run, %%t3;\n  add.u32 %%t4, %%t4, 1;\n"
    "  setp.lt.u32 %%p1, %%t4, 256;\n  @%%p1 bra L_hs;\n  mov.u32 %%j, %%i;\n"
    "L_hw:\n  setp.ge.u32 %%p1, %%j, %%e;\n  @%%p1 bra L_next;\n  mul.wide.u32 %%u3, %%j, 4;\n  add.u64 %%u4, %%u3, %%a_keys;\n"
    "  ld.global.u32 %%kj, [%%u4];\n  and.b32 %%t2, %%kj, 255;\n  mul.wide.u32 %%u8, %%t2, 4;\n  add.u64 %%u8, %%u8, %%u7;\n"
    "  ld.global.u32 %%t3, [%%u8];\n  add.u32 %%t5, %%t3, 1;\n  st.global.u32 [%%u8], %%t5;\n  add.u64 %%u4, %%u3, %%a_vals;\n"
    "  ld.global.u32 %%t6, [%%u4];\n  mul.wide.u32 %%u5, %%t3, 4;\n  add.u64 %%u6, %%u5, %%a_vout;\n  st.global.u32 [%%u6], %%t6;\n"
    "  add.u64 %%u6, %%u5, %%a_kout;\n  @%%pko st.global.u32 [%%u6], %%kj;\n  add.u32 %%j, %%j, 1;\n  bra L_hw;\n"
    "L_next:\n  add.u32 %%q, %%q, 1;\n  setp.lt.u32 %%p1, %%q, %d;\n  @%%p1 bra L_elem;\nL_done:\n  ret;\n}\n\n",
    RUN_TILE / NT);
#undef RUN_LOAD
}

/* ptr[0..total) = 0 (u32 words). */
static void k_zero(kl_str *s) {
  entry(s, "ks_zero", "ptr total");
  narrow(s, "total");
  grid_loop_open(s);
  E("  mul.wide.u32 %%u6, %%i, 4;\n  add.u64 %%u6, %%u6, %%a_ptr;\n  st.global.u32 [%%u6], 0;\n");
  grid_loop_close(s);
}

static char *module_text;

static void write_module(void) {
  kl_str t;
  kl_str_init(&t);
  kl_str *s = &t;
  E("// kiln's GPU sort (runtime/gpusort_ptx.c)\n.version 7.0\n.target sm_70\n.address_size 64\n\n");
  k_encode(s);
  for (int it = 8; it <= TILE_IT; it *= 2) {
    k_hist(s, it);
    k_digits(s, it);
    k_scatter(s, it, 0);
    k_scatter(s, it, 1);
  }
  k_scan(s);
  for (int it = 1; it <= TILE_IT; it *= 2) k_small(s, it);
  k_gather(s);
  k_iota(s);
  k_decode(s);
  k_fixup(s);
  k_runs(s);
  k_zero(s);
  if (t.failed) kl_str_free(&t);
  module_text = t.data; /* NULL when out of memory */
}

const char *kl_gpusort_ptx(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, write_module);
  return module_text;
}
