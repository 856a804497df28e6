"""kiln.tree: the short names of jax.tree (`kiln.tree.map` is
`kiln.tree_util.tree_map`, and so on), plus `static` for dataclass fields."""

from kiln._src.tree_util import public as _public
from kiln._src.tree_util import static, tree_unflatten as unflatten  # noqa: F401

# Typed key arrays are leaves here, as in JAX (kiln's transformations see their data).
all = _public.tree_all
broadcast = _public.tree_broadcast
flatten = _public.tree_flatten
flatten_with_path = _public.tree_flatten_with_path
leaves = _public.tree_leaves
leaves_with_path = _public.tree_leaves_with_path
map = _public.tree_map
map_with_path = _public.tree_map_with_path
reduce = _public.tree_reduce
reduce_associative = _public.tree_reduce_associative
structure = _public.tree_structure
transpose = _public.tree_transpose

__all__ = [
    "all", "broadcast", "flatten", "flatten_with_path", "leaves",
    "leaves_with_path", "map", "map_with_path", "reduce", "reduce_associative",
    "static", "structure", "transpose", "unflatten",
]
