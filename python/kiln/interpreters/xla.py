"""jax.interpreters.xla: kiln compiles without XLA. The type registries libraries extend exist with
entries for the types kiln takes as arrays (a library's new entries are recorded; kiln converts
values with its own rules)."""
import numpy as np


def _canonical(x):
    from kiln._src import dtypes
    a = np.asarray(x)
    return a.astype(dtypes.canonicalize_dtype(a.dtype), copy=False)


def _aval(x):
    from kiln._src.primitive import aval_of
    return aval_of(x)


canonicalize_dtype_handlers = {t: _canonical for t in (np.ndarray, np.generic, bool, int, float, complex)}
pytype_aval_mappings = {t: _aval for t in (np.ndarray, np.generic, bool, int, float, complex)}
