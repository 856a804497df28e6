"""jax.extend.linear_util: wrapped functions with transformations and stores (the helper JAX's
older interpreters use). kiln's own transformations do not use it; libraries that wrap functions
with it (flax, haiku, numpyro) get a working WrappedFun."""
import functools


class StoreException(Exception):
    pass


class Store:
    """A value set once (a transformation's auxiliary output)."""
    __slots__ = ("_val",)
    _EMPTY = object()

    def __init__(self):
        self._val = Store._EMPTY

    def store(self, val):
        if self._val is not Store._EMPTY:
            raise StoreException("Store occupied")
        self._val = val

    def reset(self):
        self._val = Store._EMPTY

    @property
    def val(self):
        if self._val is Store._EMPTY:
            raise StoreException("Store empty")
        return self._val

    def __nonzero__(self):
        return self._val is not Store._EMPTY

    __bool__ = __nonzero__


class WrappedFun:
    """f with a stack of transformations (generators as JAX's) and params."""

    def __init__(self, f, transforms=(), stores=(), params=(), debug_info=None):
        self.f, self.transforms, self.stores, self.params = f, tuple(transforms), tuple(stores), tuple(params)
        self.debug_info = debug_info

    @property
    def __name__(self):
        return getattr(self.f, "__name__", "<unnamed wrapped function>")

    def wrap(self, gen, gen_static_args, out_store):
        return WrappedFun(self.f, ((gen, gen_static_args),) + self.transforms, (out_store,) + self.stores,
                          self.params, self.debug_info)

    def call_wrapped(self, *args, **kwargs):
        stack = []
        for (gen, static), store in zip(self.transforms, self.stores):
            g = gen(*(tuple(static) + tuple(args)), **kwargs)
            args, kwargs = next(g)
            stack.append((g, store))
        ans = self.f(*args, **dict(self.params, **kwargs))
        for g, store in reversed(stack):
            try:
                out = g.send(ans)
            except StopIteration as e:
                out = e.value
            if store is not None:
                ans, side = out
                store.store(side)
            else:
                ans = out
        return ans

    def __eq__(self, other):
        return isinstance(other, WrappedFun) and (self.f, self.transforms, self.params) == \
            (other.f, other.transforms, other.params)

    def __hash__(self):
        return hash((self.f, self.transforms, self.params))


def wrap_init(f, params=None, *, debug_info=None):
    return WrappedFun(f, params=tuple(sorted((params or {}).items())), debug_info=debug_info)


def _curried(transform):
    """transform(gen, fun, *static), also usable as a decorator @transform(gen) (JAX curries these)."""
    @functools.wraps(transform)
    def curried(gen, *rest, **kwargs):
        if not rest:
            return functools.partial(curried, gen, **kwargs)
        return transform(gen, *rest, **kwargs)
    return curried


@_curried
def transformation(gen, fun, *gen_static_args):
    return fun.wrap(gen, gen_static_args, None)


@_curried
def transformation_with_aux(gen, fun, *gen_static_args, use_eq_store=False):
    del use_eq_store
    out_store = Store()
    return fun.wrap(gen, gen_static_args, out_store), (lambda: out_store.val)


@_curried
def transformation2(gen, fun, *gen_static_args):
    """gen(f, *gen_static_args, *args) around fun (the newer style: gen calls f itself)."""
    return WrappedFun(functools.partial(gen, fun.call_wrapped, *gen_static_args), debug_info=fun.debug_info)


@_curried
def transformation_with_aux2(gen, fun, *gen_static_args, use_eq_store=False):
    """gen(f, store, *gen_static_args, *args) around fun; the store's value is the second result."""
    del use_eq_store
    out_store = Store()
    wrapped = WrappedFun(functools.partial(gen, fun.call_wrapped, out_store, *gen_static_args),
                         debug_info=fun.debug_info)
    return wrapped, (lambda: out_store.val)


def merge_linear_aux(aux1, aux2):
    try:
        out1 = aux1()
    except StoreException:
        return False, aux2()
    return True, out1


def cache(call, *, explain=None):
    del explain
    return functools.lru_cache(maxsize=None)(call)


Callable = WrappedFun
