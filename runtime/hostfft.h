/* hostfft.h: fast Fourier transforms on host memory for the CPU runtime
 * (lax.fft): complex and real, over the last 1 to 3 axes, float32 and
 * float64. Written from the math; depends on the C library and pthreads only.
 *
 * KILN_NUM_THREADS caps the threads a large transform uses (default: the
 * online processors); KILN_FFT_ISA=generic turns off the AVX2 kernels. */
#ifndef KL_HOSTFFT_H
#define KL_HOSTFFT_H
#include <stddef.h>
#include <stdint.h>

/* lax.FftType order: FFT, IFFT, RFFT, IRFFT. */
typedef enum {
  KL_FFT_FWD = 0, /* complex -> complex, exp(-2 pi i jk/N) */
  KL_FFT_INV = 1, /* complex -> complex, exp(+2 pi i jk/N) / prod(n) */
  KL_FFT_R2C = 2, /* real -> half spectrum (numpy rfftn over the axes) */
  KL_FFT_C2R = 3  /* half spectrum -> real / prod(n) (numpy irfftn, s=n) */
} kl_fft_kind;

/* Batched FFT over the last `rank` (1..3) axes of row-major arrays, `howmany`
 * transforms one after another in memory.
 * n[0..rank-1]: the transform lengths (for R2C/C2R: the lengths of the REAL
 * signal; the complex side has last axis n[rank-1]/2+1).
 * dbl: 0 = float32/complex64, 1 = float64/complex128. Complex data is
 * interleaved (re, im) pairs.
 * C2R ignores the imaginary parts of the DC and Nyquist bins, as numpy does.
 * in and out never alias; in is not written. Returns 0, or -1 with a message
 * in err (err may be NULL) on bad arguments or out of memory. Thread-safe:
 * twiddle tables are cached per (length, precision) for the process, in a
 * bounded cache. */
int kl_host_fft(kl_fft_kind kind, int dbl, int rank, const int64_t *n,
                int64_t howmany, const void *in, void *out, char *err,
                size_t errlen);

#endif
