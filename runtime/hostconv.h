/* hostconv.h: convolutions on host memory for the CPU runtime (the conv family's host routine):
 * im2col + GEMM through the BLAS that runtime/hostla.c opens, col2im for the input gradient,
 * split over kiln's CPU pool. Depends on ir/dtype.h and the C library only. */
#ifndef KL_HOSTCONV_H
#define KL_HOSTCONV_H
#include <stddef.h>
#include <stdint.h>

#include "../ir/dtype.h"

/* The geometry of one convolution, channels last: input x (n, in..., c), kernel w (o, k..., c / g),
 * output y (n, out..., o); g feature groups (c and o multiples of g). Window j of axis d starts
 * at input position j * stride[d] - lo[d] (outside [0, in[d]): zeros), kernel tap t reads
 * t * dil[d] further on. */
typedef struct {
  int nd;                                /* spatial rank, 1 to 3 */
  int64_t n, c, o, g;                    /* batch, input features, output features, groups */
  int64_t in[3], k[3], out[3];           /* spatial extents of x, w, y */
  int64_t stride[3], lo[3], dil[3];      /* per axis */
} kl_conv_geom;

typedef enum {
  KL_HOSTCONV_FWD,       /* out y = conv(a = x, b = w) */
  KL_HOSTCONV_BWD_DATA,  /* out x = conv_bwd_data(a = y, b = w): the transposed convolution */
  KL_HOSTCONV_BWD_FILTER /* out w = conv_bwd_filter(a = x, b = y) */
} kl_hostconv_kind;

/* One convolution of element type t (float32, float64; float16/bfloat16 compute in float32) over
 * contiguous row-major buffers; out is fully written and does not alias a or b. 0, or nonzero
 * with a message naming the operation in err. */
int kl_host_conv(kl_hostconv_kind kind, kl_dtype t, const kl_conv_geom *g, const void *a, const void *b, void *out,
                 char *err, size_t errlen);
#endif
