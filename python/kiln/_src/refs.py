"""Mutable array references (`kiln.new_ref`, `kiln.ref`), JAX's `Ref`: an array you read with
`ref[idx]` and write with `ref[idx] = v` (or `+=`), also inside `jit`, loops and conds.

kiln keeps programs functional and gives a Ref its effects at the edges ("discharge"):

- outside any trace a Ref holds an array; a write replaces it (`x.at[idx].set(v)`);
- each trace kiln makes (api._trace) opens a scope. A Ref created inside lives in that scope
  (its value a tracer); reading or writing a Ref of an outer scope from inside is noted by every
  scope it crosses;
- a scope that threads refs (a jitted function, a loop body, a cond branch) whose trace touched
  outer Refs is traced again with their values as extra inputs and results: jit passes the
  current values at each call and stores the results back (donating the old ones: `ref[i] = v`
  under jit writes in place), a loop carries them, a cond returns them from both branches;
- other traces (grad, vmap, custom rules, checkpoint) may read outer Refs (their values are then
  constants of the trace) but not write them: NotImplementedError.

Imports core; api.py, custom.py and lax use it.
"""

from kiln._src import core, tree_util
from kiln._src.core import Array
from kiln._src.thread_state import Stack
from kiln.errors import UnexpectedTracerError

_scopes = Stack()   # this thread's live scopes, innermost last
_created = [0]  # Refs made so far in this process (scopes are skipped while none exists)


class _Scope:
    """One trace's view of the Refs: the values of those it created or bound (vals), the outer
    Refs it read and wrote (dicts used as ordered sets)."""
    __slots__ = ("what", "threads", "vals", "reads", "writes", "closed")

    def __init__(self, what, threads):
        self.what, self.threads = what, threads
        self.vals, self.reads, self.writes, self.closed = {}, {}, {}, False


class scope:
    """with refs.scope(what, threads): the Ref scope of one trace. `touched` afterwards: the outer
    Refs the trace read or wrote, in first-use order."""

    def __init__(self, what, threads=True):
        self.what, self.threads, self.touched, self.written = what, threads, [], []
        self._s = None

    def __enter__(self):
        if _created[0]:
            self._s = _Scope(self.what, self.threads)
            _scopes.append(self._s)
        return self

    def __exit__(self, *exc):
        s = self._s
        if s is not None:
            _scopes.remove(s)
            s.closed = True
            self.touched = list(dict.fromkeys(list(s.reads) + list(s.writes)))
            self.written = list(s.writes)
        return False


class bound:
    """with refs.bound(refs, vals): inside a retraced function, these Refs hold these values (the
    trace's inputs); `values()` gives their values now."""

    def __init__(self, refs, vals):
        self.refs, self.vals = list(refs), list(vals)

    def __enter__(self):
        self._s = _Scope("bound", False)
        self._s.vals.update(zip(self.refs, self.vals))
        _scopes.append(self._s)
        return self

    def values(self):
        return [self._s.vals[r] for r in self.refs]

    def __exit__(self, *exc):
        _scopes.remove(self._s)
        self._s.closed = True
        return False


def _where(ref):
    for i in range(len(_scopes) - 1, -1, -1):
        if ref in _scopes[i].vals:
            return i
    if ref._home is not None:  # made inside a trace that has ended
        raise UnexpectedTracerError(
            f"a Ref created inside {ref._home.what} was used after it ended; return its value "
            "(ref[...]) from there instead")
    return -1


class Ref:
    """A mutable array reference (JAX's jax.ref.Ref), made by kiln.new_ref(init)."""
    __slots__ = ("_value", "_home", "_frozen", "__weakref__")

    def __init__(self, value, home):
        self._value, self._home, self._frozen = value, home, False

    # -- the value, wherever it lives --
    def _get(self):
        if self._frozen:
            raise RuntimeError("this Ref was frozen (kiln.ref.freeze): it has no value any more")
        i = _where(self)
        for s in _scopes[i + 1:]:
            s.reads.setdefault(self)
        return _scopes[i].vals[self] if i >= 0 else self._value

    def _put(self, v):
        if self._frozen:
            raise RuntimeError("this Ref was frozen (kiln.ref.freeze): it cannot be written")
        i = _where(self)
        for s in _scopes[i + 1:]:
            if not s.threads and s.what != "bound":
                raise NotImplementedError(
                    f"kiln: writing a Ref made outside {s.what} inside it is not supported (its value there is "
                    f"a {s.what} tracer); make the Ref inside the function, or write a value outside it")
            s.writes.setdefault(self)
        if i + 1 < len(_scopes):
            _scopes[-1].vals[self] = v
        elif i >= 0:
            _scopes[i].vals[self] = v
        else:
            self._value = v

    def _indexed_shape(self, idx):
        """The shape ref[idx] has, or None where a traced index leaves it to the trace. Integer indices
        past the end raise ValueError, as JAX's Ref indexing does (slices clip, as NumPy's)."""
        import numpy as np
        shape = tuple(self._get().shape)
        if idx is Ellipsis or (isinstance(idx, tuple) and not idx):
            return shape
        items = idx if isinstance(idx, tuple) else (idx,)
        static = []
        for i in items:
            if isinstance(i, Array):
                if isinstance(i, core.Tracer):
                    return None
                i = np.asarray(i)
            static.append(i)
        try:
            return np.broadcast_to(np.empty((), bool), shape)[tuple(static)].shape
        except IndexError as e:
            raise ValueError(f"Out of bound indexer: {e} (Ref shape {shape})") from None

    def _checked(self, idx, value, what):
        """value as written to ref[idx] by `what`: exactly the Ref's dtype and the indexed shape (JAX
        converts and broadcasts nothing: ValueError)."""
        from kiln._src import dtypes
        import numpy as np
        cur = self._get()
        v = value if isinstance(value, Array) else core.asarray(value)
        floating = [dtypes.issubdtype(d, np.floating) for d in (cur.dtype, v.dtype)]
        integer = [dtypes.issubdtype(d, np.integer) for d in (cur.dtype, v.dtype)]
        if v.dtype != cur.dtype and ((v.weak_type and all(floating)) or all(integer)):
            v = v.astype(cur.dtype)  # JAX's implicit casts: weak floats to floats, integers to integers
        if v.dtype != cur.dtype:
            raise ValueError(f"Invalid dtype for `{what}`. Ref dtype: {cur.dtype}. Value dtype: {v.dtype}.")
        want = self._indexed_shape(idx)
        if want is not None and tuple(v.shape) != want:
            raise ValueError(f"Invalid shape for `{what}`. Ref shape: {tuple(cur.shape)}. Expected shape: {want}. "
                             f"Value shape: {tuple(v.shape)}.")
        return v

    # -- JAX's interface --
    @property
    def shape(self):
        return tuple(self._get().shape)

    @property
    def dtype(self):
        return self._get().dtype

    @property
    def ndim(self):
        return self._get().ndim

    @property
    def size(self):
        return self._get().size

    def __getitem__(self, idx):
        v = self._get()
        self._indexed_shape(idx)  # (out-of-bound integer indices raise)
        if idx is Ellipsis or (isinstance(idx, tuple) and not idx):
            # a copy outside traces: the Ref keeps its buffer to itself (jit calls donate it)
            return v if isinstance(v, core.Tracer) else core.asarray(v).copy()
        return v[idx]

    def __setitem__(self, idx, value):
        self._write(idx, value, "swap")

    def _write(self, idx, value, what):
        v = self._checked(idx, value, what)
        if idx is Ellipsis or (isinstance(idx, tuple) and not idx):
            self._put(v)
        else:
            self._put(self._get().at[idx].set(v))

    def get(self, idx=Ellipsis):
        return self[idx]

    def set(self, value, idx=Ellipsis):
        self[idx] = value

    def addupdate(self, x, idx=Ellipsis):
        x = self._checked(idx, x, "addupdate")
        if idx is Ellipsis or (isinstance(idx, tuple) and not idx):
            self._put(self._get() + x)
        else:
            self._put(self._get().at[idx].add(x))

    def swap(self, value, idx=Ellipsis):
        prev = self[idx]
        self[idx] = value
        return prev

    def __len__(self):
        if not self.shape:
            raise TypeError("len() of an unsized Ref")
        return self.shape[0]

    def __repr__(self):
        if self._frozen:
            return "Ref(<frozen>)"
        v = self._get()
        if isinstance(v, core.Tracer):
            return f"Ref({v.dtype.name}[{','.join(str(d) for d in v.shape)}])"
        import numpy as np
        body = np.array2string(np.asarray(v), separator=", ", prefix="Ref(")
        return f"Ref({body}, dtype={v.dtype.name})"

    def __array__(self, dtype=None, copy=None):
        import numpy as np
        return np.asarray(self._get(), dtype=dtype)

    def __bool__(self):
        raise TypeError("a Ref has no truth value; read it first (bool(ref[...]))")

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other


# A Ref passed to a jitted function is part of its signature (the same Ref object hits the same
# cache entry) and reaches the function as itself: its reads and writes are the jit's effects.
tree_util.register_pytree_node(Ref, lambda r: ((), r), lambda r, _: r)


def new_ref(init_val, *, memory_space=None, kind=None):
    """A Ref holding (a copy of) init_val."""
    if memory_space is not None:
        raise NotImplementedError("kiln.new_ref: memory_space is not supported (one memory space per device)")
    if kind not in (None, "no_grad_no_remat"):
        raise ValueError(f"new_ref: kind must be None or 'no_grad_no_remat', got {kind!r}")
    v = init_val if isinstance(init_val, Array) else core.asarray(init_val)
    if not isinstance(v, core.Tracer):
        v = v.copy()  # the Ref's own buffer
    _created[0] += 1
    home = _scopes[-1] if _scopes else None
    r = Ref(v, home)
    if home is not None:
        home.vals[r] = v
    return r


def get(ref, idx=None):
    return ref[Ellipsis if idx is None else idx]


def set(ref, idx, value):  # noqa: A001 (JAX's name)
    ref[Ellipsis if idx is None else idx] = value


def swap(ref, idx, value):
    return ref.swap(value, Ellipsis if idx is None else idx)


def addupdate(ref, idx, x):
    ref.addupdate(x, Ellipsis if idx is None else idx)


def freeze(ref):
    """The Ref's value; the Ref is invalid afterwards."""
    v = ref._get()
    ref._frozen = True
    return v


def values(refs):
    """The current values of refs (for threading them into a retraced function)."""
    return [r._get() for r in refs]


def store(refs, vals):
    """Writes vals back into refs (after a threaded call)."""
    for r, v in zip(refs, vals):
        r._put(v)
