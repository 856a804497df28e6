"""kiln.dtypes: jax.dtypes — the dtype facts kiln uses (canonicalization, promotion, bfloat16)."""
from kiln._src.dtypes import (bfloat16, canonicalize_dtype, finfo, iinfo, issubdtype, promote_types,  # noqa: F401
                              result_type)
from kiln._src.toplevel import float0  # noqa: F401


def is_weakly_typed(x):
    """Whether x is weakly typed (a Python scalar, or an array made from one)."""
    from kiln._src.dtypes import is_weakly_typed as w
    return w(x)
