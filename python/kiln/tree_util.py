"""kiln.tree_util: pytree utilities (the public face of kiln._src.tree_util),
the names of jax.tree_util."""

from kiln._src.tree_util import (
    DictKey,
    FlattenedIndexKey,
    GetAttrKey,
    KeyEntry,
    KeyPath,
    Partial,
    PyTreeDef,
    SequenceKey,
    keystr,
    register_dataclass,
    register_pytree_node,
    register_pytree_node_class,
    register_pytree_with_keys,
    register_pytree_with_keys_class,
    register_static,
    tree_unflatten,
    treedef_children,
    treedef_is_leaf,
    treedef_tuple,
)
from kiln._src.tree_util import public as _public

# What users call sees typed key arrays as leaves (kiln's transformations see their data).
all_leaves = _public.all_leaves
flatten_one_level = _public.flatten_one_level
flatten_one_level_with_keys = _public.flatten_one_level_with_keys
is_tree_node = _public.is_tree_node
tree_all = _public.tree_all
tree_broadcast = _public.tree_broadcast
tree_flatten = _public.tree_flatten
tree_flatten_with_path = _public.tree_flatten_with_path
tree_leaves = _public.tree_leaves
tree_leaves_with_path = _public.tree_leaves_with_path
tree_map = _public.tree_map
tree_map_with_path = _public.tree_map_with_path
tree_reduce = _public.tree_reduce
tree_reduce_associative = _public.tree_reduce_associative
tree_structure = _public.tree_structure
tree_transpose = _public.tree_transpose

__all__ = [
    "DictKey", "FlattenedIndexKey", "GetAttrKey", "KeyEntry", "KeyPath",
    "Partial", "PyTreeDef", "SequenceKey", "all_leaves", "flatten_one_level",
    "flatten_one_level_with_keys", "is_tree_node", "keystr",
    "register_dataclass", "register_pytree_node", "register_pytree_node_class",
    "register_pytree_with_keys", "register_pytree_with_keys_class",
    "register_static", "tree_all", "tree_broadcast", "tree_flatten",
    "tree_flatten_with_path", "tree_leaves", "tree_leaves_with_path",
    "tree_map", "tree_map_with_path", "tree_reduce", "tree_reduce_associative",
    "tree_structure", "tree_transpose", "tree_unflatten", "treedef_children",
    "treedef_is_leaf", "treedef_tuple", "default_registry",
]


class _DefaultRegistry:
    """JAX's default pytree registry object (its methods are tree_util's functions)."""

    def flatten(self, tree, is_leaf=None):
        return tree_flatten(tree, is_leaf)

    def flatten_one_level(self, tree):
        return flatten_one_level(tree)


default_registry = _DefaultRegistry()
