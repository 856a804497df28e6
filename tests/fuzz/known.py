"""Disagreements with JAX that the fuzzer knows about. tests/test_fuzz.py fails on any signature
found in its seeds that no entry here matches; an entry that no longer reproduces is reported as
stale (a warning), and should then be deleted.

Each entry: the signature (op, transformation, dtype, class) as fnmatch patterns ('*' matches
anything), its status ('open': a kiln defect to fix; 'deliberate': kiln differs on purpose) and
the reason. When you fix a defect, delete its entries; when you add one, say why."""
import fnmatch
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
    for op in ("jnp.matmul", "jnp.dot", "lax.dot_general")
]


def matches(entry, sig):
    op, transform, dtype, cls = sig
    return all(fnmatch.fnmatchcase(v, p) for v, p in
               ((op, entry.op), (transform, entry.transform), (dtype, entry.dtype), (cls, entry.cls)))


def match(sig):
    """The first entry matching signature `sig`, or None."""
    return next((k for k in KNOWN if matches(k, sig)), None)
