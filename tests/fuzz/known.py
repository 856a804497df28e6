"""Disagreements with JAX that the fuzzer knows about. tests/test_fuzz.py fails on any signature
found in its seeds that no entry here matches; an entry that no longer reproduces is reported as
stale (a warning), and should then be deleted.

Each entry: the signature (op, transformation, dtype, class) as patterns ('*' matches anything,
the only wildcard), its status ('open': a kiln defect to fix; 'deliberate': kiln differs on purpose) and
the reason. When you fix a defect, delete its entries; when you add one, say why."""
import re
from collections import namedtuple

Known = namedtuple("Known", "op transform dtype cls status reason")

KNOWN = [
    Known("jax.nn.*softmax", "*", "uint*", "wrong_value", "deliberate",
          "JAX subtracts the max in the unsigned dtype before converting, so x - max wraps "
          "(softmax(uint8 [8, 7]) is [0, nan], log_softmax [-inf, -inf]); kiln converts to float "
          "first and gives the softmax ([0.731, 0.269])"),
] + [
    Known(op, "*", "*complex*", "wrong_value", "deliberate",
          "with inf operands, which non-finite value a complex product inside a matmul gives is the "
          "kernel's: XLA's Eigen gemm gives nan+nanj, OpenBLAS nan+infj, the textbook sum (kiln, and "
          "JAX itself for a single column) -inf+infj; finite results agree to float rounding")
    for op in ("jnp.matmul", "jnp.dot", "lax.dot_general", "jnp.einsum", "jnp.tensordot", "jnp.inner", "jnp.vdot",
               "jnp.vecdot", "jnp.matvec", "jnp.vecmat")
] + [
    # reverse mode where JAX raises (README, "Deliberate differences from JAX")
    Known("lax.while_loop", "*grad*", "*", "jax_raises", "deliberate",
          "kiln differentiates while_loop in reverse mode; JAX raises ValueError (reverse-mode "
          "differentiation does not work for lax.while_loop)"),
    Known("lax.fori_loop", "*grad*", "*", "jax_raises", "deliberate",
          "fori_loop with a traced trip count is a while_loop: kiln differentiates it, JAX raises ValueError"),
    Known("*nextafter", "*grad*", "*", "jax_raises", "deliberate",
          "kiln gives nextafter a zero derivative; JAX raises NotImplementedError (no differentiation rule)"),
    Known("*nextafter+*", "*grad*", "*", "exc_class", "deliberate",
          "a program that differentiates nextafter and then fails (softmax of a 0-d array): JAX raises "
          "NotImplementedError at nextafter, kiln differentiates it (README) and raises the later error"),
    Known("at.mul*", "*grad*", "*", "jax_raises", "deliberate",
          "kiln differentiates x.at[i].multiply(v) with duplicate indices; JAX raises NotImplementedError "
          "(scatter_mul gradients only with unique_indices=True)"),
] + [
    # x64 off, JAX's vmap hands back the NumPy argument itself when f only moves axes
    Known("transpose", "vmap", "int32", "wrong_dtype", "deliberate",
          "x64 off, vmap(lambda a: a.T) of an int64 NumPy argument: JAX returns the argument "
          "uncanonicalized, as a numpy.ndarray of int64, when f only transposes, slices or returns it "
          "(any computation gives int32); kiln returns an int32 Array, as x64=False promises"),
    Known("getitem", "vmap", "*", "wrong_dtype", "deliberate",
          "x64 off, vmap(lambda a: a[-3:]) of a 64-bit NumPy argument: JAX returns a 64-bit numpy.ndarray "
          "(uncanonicalized), kiln a 32-bit Array; the same JAX quirk as transpose/vmap/int32"),
] + [
    Known(op, "vmap", "*", "wrong_dtype", "deliberate",
          "x64 off, vmap of a function that only reshapes or broadcasts its 64-bit NumPy argument: JAX "
          "returns the argument uncanonicalized (float64/int64), kiln the 32-bit Array x64=False promises "
          "(the same JAX quirk as transpose/vmap/int32)")
    for op in ("transpose", "reshape", "jnp.broadcast_to", "astype")
] + [
    Known("at.*", "vmap", "*", "wrong_dtype", "deliberate",
          "x64 off, vmap of x.at[1:].multiply(empty) on a 64-bit NumPy x: the update is empty, so JAX "
          "returns the argument uncanonicalized (uint64), kiln the 32-bit Array x64=False promises (the "
          "same JAX quirk as transpose/vmap/int32)"),
    Known("jnp.mean+jax.nn.softmax", "*jit*", "float64", "wrong_value", "deliberate",
          "softmax of a mean holding 2e299, under jit: XLA's fusion of the two gives nan; JAX's eager "
          "result, its jit of the softmax alone, and kiln give 1"),
] + [
    Known("getitem", "*grad*", "*", "wrong_value", "deliberate",
          "an out-of-bounds static index (x[::-2, ..., 6] of a size-1 axis): JAX's indexing promises "
          "in-bounds indices, and its gradient there depends on which gather it emits (x[..., 6]: 1, "
          "x[::-2, ..., 6]: 0); kiln clamps the value as JAX does and gives the clamped element the "
          "gradient"),
    Known("jnp.imag+jnp.divide", "jit*", "*", "wrong_value", "deliberate",
          "complex x / (0+0j) under jit: XLA's simplifier gives nan+nanj where JAX's own eager division "
          "(and kiln, and C99 Annex G) give inf+infj"),
    Known("jnp.eye", "*jit*", "*", "wrong_value", "deliberate",
          "x * jnp.eye(n) with a NaN in x, under jit: XLA rewrites a product by a 0/1 mask into a select, "
          "so NaN * 0 gives 0 there; JAX's own eager product (and kiln, and IEEE) gives NaN"),
    Known("jnp.multiply", "*jit*", "complex*", "wrong_value", "deliberate",
          "complex x * 1 with an infinite x, under jit: XLA folds the product by one away (inf-infj); the "
          "complex product itself, JAX's eager one and kiln's, gives nan+nanj"),
    Known("jnp.tan+lax.cond+jnp.diagonal", "*grad*", "complex*", "wrong_value", "deliberate",
          "a gradient through an empty selection (diagonal offset past the matrix) of tan at -inf+nanj: "
          "JAX's symbolic zero cotangent gives 0, kiln multiplies a zero cotangent by the nan derivative"),
    Known("lax.rsqrt+jnp.outer", "*grad*", "float*", "wrong_value", "deliberate",
          "a gradient through an outer product with an empty operand of rsqrt at a negative x: JAX's "
          "cotangent of the empty array is a computed zero, so 0 * nan gives nan; kiln's cotangent of an "
          "empty array is a symbolic zero (no element receives one), so the gradient is 0 (the mirror "
          "image of the tan+cond+diagonal entry, where JAX's zero is the symbolic one)"),
    Known("jnp.min", "*vmap*", "complex*", "wrong_value", "deliberate",
          "complex min over elements with a NaN: JAX's comparator (a < b on the real part, then the "
          "imaginary) is no total order with NaN, so its answer is a fold-order artefact (min of "
          "[nan, 25+9j, 2.3, 1.3] is 1.3, of its rotation [1.3, nan, 25+9j, 2.3] is 2.3); NumPy gives "
          "nan, kiln the least non-NaN element"),
    Known("jnp.nanmax+*", "*jit*", "*", "wrong_value", "deliberate",
          "a NaN cotangent into a max's gradient, under jit: XLA rewrites the product by the 0/1 argmax "
          "mask into a select, so NaN * 0 gives 0 there; JAX's own eager gradient (and kiln) gives NaN "
          "at every element"),
    Known("jnp.max+jnp.std", "*jit*", "*", "wrong_value", "deliberate",
          "a NaN cotangent (std of one element: 0 * inf) into a max's gradient, under jit: XLA's rewrite "
          "of the product by the 0/1 argmax mask into a select gives 0 off the argmax; JAX's eager "
          "gradient and kiln give NaN there (as jnp.nanmax+jnp.arccos)"),
    Known("jnp.ptp+jnp.mean+jnp.std", "*jit*", "*", "wrong_value", "deliberate",
          "the same XLA jit rewrite as jnp.max+jnp.std, through ptp's max and min"),
    Known("jnp.divide+jnp.divide", "*jit*", "complex*", "wrong_value", "deliberate",
          "x / y / z with a complex zero or infinity, under jit: XLA rewrites it to x / (y * z), whose "
          "non-finite parts differ (-inf+nanj where JAX's eager division and kiln give -inf-infj)"),
    Known("jnp.cumprod", "*", "complex*", "wrong_value", "deliberate",
          "a complex running product that overflows: which non-finite parts (inf or nan) come out "
          "depends on the order of the products (XLA's scan versus kiln's), as for jnp.prod"),
    Known("lax.mul", "*", "complex*", "wrong_value", "deliberate",
          "a complex product whose partial products overflow (0.75+1.9j times 3e38-inf j in complex64): "
          "XLA's CPU product keeps -inf in the imaginary part (inf-infj), kiln's textbook product gives "
          "inf - inf = nan there (inf+nanj); the non-finite results of complex products are the kernel's"),
    Known("jnp.power", "*", "float32", "wrong_value", "deliberate",
          "a subnormal base made by an earlier statement (1e-45 ** -0.55): XLA's CPU log does not handle "
          "subnormals (JAX 8.83e24), kiln's gives the exact power (6.02e24; README: kiln computes "
          "subnormals where XLA's CPU runtime does not)"),
    Known("lax.population_count", "*grad*", "float*", "exc_class", "deliberate",
          "population_count of a float array under grad: JAX raises NotImplementedError (no "
          "differentiation rule) before its dtype check, kiln the TypeError JAX's own eager call gives "
          "(operand must have an integer dtype)"),
    Known("lax.scan", "*", "complex*", "wrong_value", "deliberate",
          "a scan whose carry is a running complex product that overflows (3e38 and inf parts in "
          "complex64): which non-finite parts come out (-inf-infj in XLA, -inf+nanj in kiln) is the "
          "product kernel's, as for lax.mul; finite results agree to rounding (seed 113098)"),
    Known("lax.cumlogsumexp", "*", "*int*", "exc_class", "deliberate",
          "cumlogsumexp of an integer array: JAX raises OverflowError from its internals (cannot convert "
          "float infinity to integer: the -inf identity in an integer dtype), kiln the TypeError naming the "
          "operation and dtype (operand must be floating point, got int16)"),
    Known("jnp.cumprod", "*grad*", "*", "wrong_value", "deliberate",
          "inf operands in a product's gradient: which non-finite value (inf or nan) comes out depends on "
          "how the derivative is written (JAX: a scan of products; kiln: prefix and suffix products); "
          "finite operands agree to rounding"),
    Known("jnp.prod+jnp.expm1", "*", "complex*", "wrong_value", "deliberate",
          "a complex product that overflows (24 factors of modulus ~3): which signs its infinite parts "
          "take depends on the order of the multiplications (XLA's reduction tree, kiln's), and expm1 "
          "passes them on; finite products agree to rounding"),
    Known("jnp.max", "*grad*", "complex*", "wrong_value", "deliberate",
          "complex max with nan and inf elements among the candidates: which one the gradient goes to is "
          "JAX's lexicographic tie-breaking on nan, undefined; finite operands agree"),
]


def _glob(value, pattern):
    """fnmatch with '*' the only wildcard (op names hold brackets: 'getitem[int array]')."""
    return re.fullmatch(".*".join(re.escape(p) for p in pattern.split("*")), value) is not None


def matches(entry, sig):
    op, transform, dtype, cls = sig
    return all(_glob(v, p) for v, p in
               ((op, entry.op), (transform, entry.transform), (dtype, entry.dtype), (cls, entry.cls)))


def match(sig):
    """The first entry matching signature `sig`, or None."""
    return next((k for k in KNOWN if matches(k, sig)), None)
