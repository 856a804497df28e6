"""kiln.numpy: NumPy's API on kiln arrays, with JAX's semantics."""

import numpy as _np

from kiln._src.dtypes import (bfloat16, bool_, dtype, finfo, float16, float32, float64, iinfo, int8, int16,
                              int32, int64, issubdtype, promote_types, result_type, uint8, uint16, uint32,
                              uint64, number, inexact, floating, integer, signedinteger, unsignedinteger,
                              generic, complex64, complex128, complex_, complexfloating)
from kiln._src.dtypes import int_, uint
from kiln._src.basearray import Array as ndarray
from kiln._src.numpy.creation import *  # noqa: F401,F403
from kiln._src.numpy.ufuncs import *  # noqa: F401,F403
from kiln._src.numpy.reductions import *  # noqa: F401,F403
from kiln._src.numpy.compare import *  # noqa: F401,F403
from kiln._src.numpy.shape_ops import *  # noqa: F401,F403
from kiln._src.numpy.linalg import *  # noqa: F401,F403
from kiln._src.numpy.more import *  # noqa: F401,F403
from kiln.numpy import linalg  # noqa: F401
from kiln.numpy import fft  # noqa: F401

bool = bool_  # noqa: A001
float_ = float64
cdouble = complex128
csingle = complex64
pi = _np.pi
e = _np.e
inf = _np.inf
nan = _np.nan
euler_gamma = _np.euler_gamma
newaxis = None

from kiln._src import array_methods as _am  # noqa: E402
import sys as _sys  # noqa: E402

_am._install(_sys.modules[__name__])
del _am, _sys
