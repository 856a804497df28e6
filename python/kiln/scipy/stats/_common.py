"""Helpers of kiln.scipy.stats' distribution modules: argument promotion and the exp-of-log twins
(pdf from logpdf, pmf from logpmf, sf from logsf), which keep their log function's signature."""

import functools

from kiln import lax
from kiln._src.numpy.util import promote_args_inexact

__all__ = ["promote", "exp_of"]


def promote(name, *args):
    """The arguments promoted to one inexact dtype and broadcast to one shape (JAX's promote_args_inexact)."""
    return promote_args_inexact(name, *args)


def exp_of(log_fn, name):
    """exp(log_fn(...)), with log_fn's argument names and defaults (e.g. pdf from logpdf)."""
    @functools.wraps(log_fn)
    def fn(*args, **kwargs):
        return lax.exp(log_fn(*args, **kwargs))
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = f"exp({log_fn.__name__}): " + (log_fn.__doc__ or "").split("\n")[0]
    return fn
