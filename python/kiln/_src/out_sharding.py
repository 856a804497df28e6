"""JAX 0.10.2's out_sharding= keyword on the functions that make arrays (jnp.zeros, jnp.dot,
lax.dot_general, jax.random.normal, ...): where the result goes. kiln applies it as reshard does
(device_put of a concrete result; inside a traced function the value as it is: kiln's jit places
values itself). Installed on the public modules by kiln/__init__.py."""
import functools

# module -> the names JAX gives out_sharding=
NAMES = {
    "kiln.lax": ("broadcast", "broadcast_in_dim", "broadcasted_iota", "conv_general_dilated", "dot", "dot_general",
                 "empty", "ragged_dot", "ragged_dot_general", "reduce", "reduce_sum", "reshape", "rng_bit_generator"),
    "kiln.numpy": ("arange", "array", "asarray", "bincount", "broadcast_to", "dot", "einsum", "empty", "full",
                   "full_like", "matmul", "ones", "ones_like", "percentile", "ravel", "repeat", "reshape",
                   "tensordot", "zeros", "zeros_like"),
    "kiln.random": ("ball", "bernoulli", "beta", "bits", "categorical", "cauchy", "chisquare", "dirichlet",
                    "exponential", "f", "gamma", "generalized_normal", "geometric", "gumbel", "laplace", "loggamma",
                    "logistic", "lognormal", "maxwell", "multivariate_normal", "normal", "orthogonal", "pareto",
                    "permutation", "poisson", "rademacher", "randint", "rayleigh", "t", "triangular",
                    "truncated_normal", "uniform", "wald"),
}


def _with_out_sharding(fn):
    @functools.wraps(fn)
    def wrapped(*args, out_sharding=None, **kwargs):
        out = fn(*args, **kwargs)
        if out_sharding is None:
            return out
        from kiln._src.toplevel import reshard
        return reshard(out, out_sharding)
    wrapped._kiln_out_sharding = True
    return wrapped


def install():
    import importlib
    for module_name, names in NAMES.items():
        module = importlib.import_module(module_name)
        for name in names:
            fn = getattr(module, name, None)
            if fn is None or getattr(fn, "_kiln_out_sharding", False):
                continue
            try:
                import inspect
                if "out_sharding" in inspect.signature(fn).parameters:
                    continue  # it takes the keyword itself
            except (TypeError, ValueError):
                pass
            setattr(module, name, _with_out_sharding(fn))
