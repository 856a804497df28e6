"""kiln.dtypes: jax.dtypes — the dtype facts kiln uses (canonicalization, promotion, bfloat16)."""
from kiln._src.dtypes import (bfloat16, canonicalize_dtype, finfo, iinfo, issubdtype, promote_types,  # noqa: F401
                              result_type)
from kiln._src.toplevel import float0  # noqa: F401


def is_weakly_typed(x):
    """Whether x is weakly typed (a Python scalar, or an array made from one)."""
    from kiln._src.dtypes import is_weakly_typed as w
    return w(x)


from kiln._src.dtypes import TypePromotionError  # noqa: F401,E402  (jax_numpy_dtype_promotion='strict')


from kiln._src.dtypes import extended, prng_key  # noqa: F401,E402  (the abstract extended dtypes)


def itemsize_bits(dtype):
    """The bits one element of dtype takes (bool: 8)."""
    import numpy as np
    return np.dtype(dtype).itemsize * 8


def scalar_type_of(x):
    """The Python scalar type of x's dtype: bool, int, float or complex."""
    import numpy as np
    kind = np.dtype(getattr(x, "dtype", None) or np.asarray(x).dtype).kind
    return {"b": bool, "i": int, "u": int, "f": float, "c": complex, "V": float}[kind]
