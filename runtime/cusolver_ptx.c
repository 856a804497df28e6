/* cusolver_ptx.c: the small kernels around cuSOLVER's routines (runtime/cusolver.c), written as
 * PTX by hand so the runtime needs no compiler: a strided batched copy (transposes between
 * kiln's row-major layout and LAPACK's column-major one, with an optional conjugation), the NaN
 * and triangle fix-up that turns devInfo into JAX's results without reading it back, LAPACK's
 * 1-based pivots into kiln's pivots and permutation, and the pointer arrays of the batched
 * routines. Every parameter is 64 bits (kl_cuda_launch passes pointer-sized values). Depends on
 * nothing. */
#include "cusolver.h"

/* Each kernel is a grid-stride loop; %rd1 the element, %rd2 the grid's stride. */
#define PROLOGUE                                                                                   \
  "  mov.u32 %r1, %ctaid.x;\n  mov.u32 %r2, %ntid.x;\n  mov.u32 %r3, %tid.x;\n"                    \
  "  mov.u32 %r4, %nctaid.x;\n  mad.lo.u32 %r5, %r1, %r2, %r3;\n  mul.lo.u32 %r6, %r4, %r2;\n"     \
  "  cvt.u64.u32 %rd1, %r5;\n  cvt.u64.u32 %rd2, %r6;\n"

static const char ptx[] =
    ".version 7.0\n.target sm_70\n.address_size 64\n\n"
    /* dst[b][i][j] (rows x cols, dense) = src[b*sstride + i*si + j*sj], elements of esz bytes
     * (4, 8 or 16); conj: negate the imaginary half (the high word) of 8- and 16-byte elements */
    ".visible .entry kl_sol_strided(.param .u64 dst, .param .u64 src, .param .u64 rows, .param .u64 cols,\n"
    "    .param .u64 si, .param .u64 sj, .param .u64 sstride, .param .u64 total, .param .u64 esz, .param .u64 conj)\n{\n"
    "  .reg .pred %p<4>;\n  .reg .b32 %r<8>;\n  .reg .b64 %rd<32>;\n" PROLOGUE
    "  ld.param.u64 %rd3, [dst];\n  cvta.to.global.u64 %rd3, %rd3;\n"
    "  ld.param.u64 %rd4, [src];\n  cvta.to.global.u64 %rd4, %rd4;\n"
    "  ld.param.u64 %rd5, [rows];\n  ld.param.u64 %rd6, [cols];\n  ld.param.u64 %rd7, [si];\n  ld.param.u64 %rd8, [sj];\n"
    "  ld.param.u64 %rd9, [sstride];\n  ld.param.u64 %rd10, [total];\n  ld.param.u64 %rd11, [esz];\n"
    "  ld.param.u64 %rd12, [conj];\n  mul.lo.u64 %rd13, %rd5, %rd6;\n  setp.ne.u64 %p2, %rd12, 0;\n"
    "  mov.b64 %rd30, 0x8000000000000000;\n"
    "L_loop:\n  setp.ge.u64 %p1, %rd1, %rd10;\n  @%p1 bra L_end;\n"
    "  div.u64 %rd14, %rd1, %rd13;\n  mul.lo.u64 %rd15, %rd14, %rd13;\n  sub.u64 %rd15, %rd1, %rd15;\n"
    "  div.u64 %rd16, %rd15, %rd6;\n  mul.lo.u64 %rd17, %rd16, %rd6;\n  sub.u64 %rd17, %rd15, %rd17;\n"
    "  mul.lo.u64 %rd18, %rd14, %rd9;\n  mad.lo.u64 %rd18, %rd16, %rd7, %rd18;\n  mad.lo.u64 %rd18, %rd17, %rd8, %rd18;\n"
    "  mul.lo.u64 %rd18, %rd18, %rd11;\n  add.u64 %rd18, %rd4, %rd18;\n"
    "  mul.lo.u64 %rd19, %rd1, %rd11;\n  add.u64 %rd19, %rd3, %rd19;\n"
    "  setp.eq.u64 %p3, %rd11, 4;\n  @%p3 bra L_4;\n  setp.eq.u64 %p3, %rd11, 8;\n  @%p3 bra L_8;\n"
    "  ld.global.u64 %rd20, [%rd18];\n  ld.global.u64 %rd21, [%rd18+8];\n  @%p2 xor.b64 %rd21, %rd21, %rd30;\n"
    "  st.global.u64 [%rd19], %rd20;\n  st.global.u64 [%rd19+8], %rd21;\n  bra L_next;\n"
    "L_8:\n  ld.global.u64 %rd20, [%rd18];\n  @%p2 xor.b64 %rd20, %rd20, %rd30;\n  st.global.u64 [%rd19], %rd20;\n"
    "  bra L_next;\n"
    "L_4:\n  ld.global.u32 %r7, [%rd18];\n  st.global.u32 [%rd19], %r7;\n"
    "L_next:\n  add.u64 %rd1, %rd1, %rd2;\n  bra L_loop;\nL_end:\n  ret;\n}\n\n"
    /* data: nrows rows of cols elements (nc real scalars each: float32, or float64 when dbl),
     * rows of them to a matrix; a block a row (a grid-stride loop over rows, the block's threads
     * along it: no division per element). A matrix whose info (int32 each; none when info is 0)
     * is nonzero becomes NaN; otherwise, with tri 1 the elements above the diagonal become 0,
     * with tri 2 those below it (only those are written) */
    ".visible .entry kl_sol_fix(.param .u64 data, .param .u64 info, .param .u64 nrows, .param .u64 rows,\n"
    "    .param .u64 cols, .param .u64 nc, .param .u64 tri, .param .u64 dbl)\n{\n"
    "  .reg .pred %p<8>;\n  .reg .b32 %r<10>;\n  .reg .b64 %rd<32>;\n"
    "  mov.u32 %r1, %ctaid.x;\n  mov.u32 %r2, %nctaid.x;\n  mov.u32 %r3, %tid.x;\n  mov.u32 %r4, %ntid.x;\n"
    "  cvt.u64.u32 %rd1, %r1;\n  cvt.u64.u32 %rd2, %r2;\n  cvt.u64.u32 %rd26, %r3;\n  cvt.u64.u32 %rd27, %r4;\n"
    "  ld.param.u64 %rd3, [data];\n  cvta.to.global.u64 %rd3, %rd3;\n  ld.param.u64 %rd4, [info];\n"
    "  ld.param.u64 %rd5, [nrows];\n  ld.param.u64 %rd6, [rows];\n  ld.param.u64 %rd7, [cols];\n"
    "  ld.param.u64 %rd8, [nc];\n  ld.param.u64 %rd9, [tri];\n  ld.param.u64 %rd10, [dbl];\n"
    "  setp.ne.u64 %p5, %rd4, 0;\n  cvta.to.global.u64 %rd11, %rd4;\n  setp.ne.u64 %p6, %rd10, 0;\n"
    "  selp.u64 %rd20, 8, 4, %p6;\n  mul.lo.u64 %rd21, %rd20, %rd8;\n  mul.lo.u64 %rd28, %rd7, %rd8;\n"
    "  mov.u32 %r6, 0;\n  mov.u64 %rd23, 0;\n  mov.b32 %r5, 0x7fc00000;\n  mov.b64 %rd22, 0x7ff8000000000000;\n"
    "  setp.eq.u64 %p3, %rd9, 1;\n"
    "L_row:\n  setp.ge.u64 %p1, %rd1, %rd5;\n  @%p1 bra L_end;\n"
    "  div.u64 %rd12, %rd1, %rd6;\n  mul.lo.u64 %rd13, %rd12, %rd6;\n  sub.u64 %rd13, %rd1, %rd13;\n"
    "  mul.lo.u64 %rd14, %rd1, %rd28;\n  mul.lo.u64 %rd14, %rd14, %rd20;\n  add.u64 %rd14, %rd3, %rd14;\n"
    "  @!%p5 bra L_tri;\n  shl.b64 %rd15, %rd12, 2;\n  add.u64 %rd15, %rd11, %rd15;\n"
    "  ld.global.u32 %r7, [%rd15];\n  setp.ne.s32 %p2, %r7, 0;\n  @%p2 bra L_nan;\n"
    "L_tri:\n  setp.eq.u64 %p2, %rd9, 0;\n  @%p2 bra L_next;\n"
    /* tri 1: columns r+1 .. cols; tri 2: columns 0 .. min(r, cols) */
    "  add.u64 %rd16, %rd13, 1;\n  selp.u64 %rd17, %rd16, 0, %p3;\n  min.u64 %rd18, %rd13, %rd7;\n"
    "  selp.u64 %rd19, %rd7, %rd18, %p3;\n  add.u64 %rd24, %rd17, %rd26;\n"
    "L_zero:\n  setp.ge.u64 %p4, %rd24, %rd19;\n  @%p4 bra L_next;\n"
    "  mul.lo.u64 %rd25, %rd24, %rd21;\n  add.u64 %rd25, %rd14, %rd25;\n"
    "  setp.eq.u64 %p7, %rd21, 4;\n  @%p7 st.global.u32 [%rd25], %r6;\n"
    "  setp.ge.u64 %p7, %rd21, 8;\n  @%p7 st.global.u64 [%rd25], %rd23;\n"
    "  setp.eq.u64 %p7, %rd21, 16;\n  @%p7 st.global.u64 [%rd25+8], %rd23;\n"
    "  add.u64 %rd24, %rd24, %rd27;\n  bra L_zero;\n"
    "L_nan:\n  mov.u64 %rd24, %rd26;\n"
    "L_nan_loop:\n  setp.ge.u64 %p4, %rd24, %rd28;\n  @%p4 bra L_next;\n"
    "  mul.lo.u64 %rd25, %rd24, %rd20;\n  add.u64 %rd25, %rd14, %rd25;\n"
    "  @%p6 st.global.u64 [%rd25], %rd22;\n  @!%p6 st.global.u32 [%rd25], %r5;\n"
    "  add.u64 %rd24, %rd24, %rd27;\n  bra L_nan_loop;\n"
    "L_next:\n  add.u64 %rd1, %rd1, %rd2;\n  bra L_row;\nL_end:\n  ret;\n}\n\n"
    /* one thread per matrix: piv (k int32 each, LAPACK's 1-based rows) made 0-based, perm (m
     * each) the permutation those row swaps make, starting from the identity; a pivot out of
     * range (none from a sound factorization) is skipped */
    ".visible .entry kl_sol_perm(.param .u64 piv, .param .u64 perm, .param .u64 batch, .param .u64 k, .param .u64 m)\n{\n"
    "  .reg .pred %p<4>;\n  .reg .b32 %r<10>;\n  .reg .b64 %rd<20>;\n" PROLOGUE
    "  ld.param.u64 %rd3, [piv];\n  cvta.to.global.u64 %rd3, %rd3;\n"
    "  ld.param.u64 %rd4, [perm];\n  cvta.to.global.u64 %rd4, %rd4;\n"
    "  ld.param.u64 %rd5, [batch];\n  ld.param.u64 %rd6, [k];\n  ld.param.u64 %rd7, [m];\n"
    "L_loop:\n  setp.ge.u64 %p1, %rd1, %rd5;\n  @%p1 bra L_end;\n"
    "  mul.lo.u64 %rd8, %rd1, %rd6;\n  shl.b64 %rd8, %rd8, 2;\n  add.u64 %rd8, %rd3, %rd8;\n"
    "  mul.lo.u64 %rd9, %rd1, %rd7;\n  shl.b64 %rd9, %rd9, 2;\n  add.u64 %rd9, %rd4, %rd9;\n"
    "  mov.u64 %rd10, 0;\n"
    "L_init:\n  setp.ge.u64 %p2, %rd10, %rd7;\n  @%p2 bra L_swaps;\n"
    "  shl.b64 %rd11, %rd10, 2;\n  add.u64 %rd11, %rd9, %rd11;\n  cvt.u32.u64 %r7, %rd10;\n"
    "  st.global.u32 [%rd11], %r7;\n  add.u64 %rd10, %rd10, 1;\n  bra L_init;\n"
    "L_swaps:\n  mov.u64 %rd10, 0;\n"
    "L_swap:\n  setp.ge.u64 %p2, %rd10, %rd6;\n  @%p2 bra L_next;\n"
    "  shl.b64 %rd11, %rd10, 2;\n  add.u64 %rd12, %rd8, %rd11;\n  ld.global.s32 %r8, [%rd12];\n"
    "  sub.s32 %r8, %r8, 1;\n  st.global.u32 [%rd12], %r8;\n"
    "  cvt.s64.s32 %rd14, %r8;\n  setp.ge.u64 %p3, %rd14, %rd7;\n  @%p3 bra L_skip;\n"
    "  add.u64 %rd13, %rd9, %rd11;\n  shl.b64 %rd14, %rd14, 2;\n  add.u64 %rd14, %rd9, %rd14;\n"
    "  ld.global.u32 %r7, [%rd13];\n  ld.global.u32 %r9, [%rd14];\n"
    "  st.global.u32 [%rd13], %r9;\n  st.global.u32 [%rd14], %r7;\n"
    "L_skip:\n  add.u64 %rd10, %rd10, 1;\n  bra L_swap;\n"
    "L_next:\n  add.u64 %rd1, %rd1, %rd2;\n  bra L_loop;\nL_end:\n  ret;\n}\n\n"
    /* dst[i] = base + i * stride for i < count (device addresses, as 64-bit values) */
    ".visible .entry kl_sol_ptrs(.param .u64 dst, .param .u64 base, .param .u64 stride, .param .u64 count)\n{\n"
    "  .reg .pred %p<2>;\n  .reg .b32 %r<8>;\n  .reg .b64 %rd<12>;\n" PROLOGUE
    "  ld.param.u64 %rd3, [dst];\n  cvta.to.global.u64 %rd3, %rd3;\n  ld.param.u64 %rd4, [base];\n"
    "  ld.param.u64 %rd5, [stride];\n  ld.param.u64 %rd6, [count];\n"
    "L_loop:\n  setp.ge.u64 %p1, %rd1, %rd6;\n  @%p1 bra L_end;\n"
    "  mad.lo.u64 %rd7, %rd1, %rd5, %rd4;\n  shl.b64 %rd8, %rd1, 3;\n  add.u64 %rd8, %rd3, %rd8;\n"
    "  st.global.u64 [%rd8], %rd7;\n  add.u64 %rd1, %rd1, %rd2;\n  bra L_loop;\nL_end:\n  ret;\n}\n";

const char *kl_cusolver_ptx(void) { return ptx; }
