# kiln.numpy.linalg: the public face of kiln/_src/numpy/linalg.py (see there).
from kiln._src.numpy.linalg import (  # noqa: F401
    LINALG_ALL as __all__,
    norm, vector_norm, matrix_norm, solve, inv, det, slogdet, cholesky, qr, svd, svdvals,
    eigh, eigvalsh, lstsq, pinv, matrix_rank, cond, matrix_power, multi_dot, matmul, outer,
    tensordot, cross, vecdot, diagonal, trace, matrix_transpose, LinAlgError, SVDResult,
    EighResult, QRResult, SlogdetResult, eig, eigvals, EigResult, tensorinv, tensorsolve,
)

__all__ = list(__all__)
