"""Mutable array references, as `jax.ref`: `new_ref(x)` gives a `Ref`; `ref[idx]` reads,
`ref[idx] = v` and `ref[idx] += v` write, also inside `jit` (the Ref's buffer is updated in place
through donation), `fori_loop`/`scan`/`while_loop` bodies and `cond` branches. How kiln keeps
programs functional around them: python/kiln/_src/refs.py."""

from kiln._src.refs import Ref, addupdate, freeze, get, new_ref, set, swap  # noqa: F401

__all__ = ["Ref", "new_ref", "get", "set", "swap", "addupdate", "freeze"]
