"""kiln.tree_util: pytree utilities (the public face of kiln._src.tree_util)."""

from kiln._src.tree_util import (
    Partial,
    PyTreeDef,
    all_leaves,
    register_pytree_node,
    register_pytree_node_class,
    tree_all,
    tree_flatten,
    tree_leaves,
    tree_map,
    tree_reduce,
    tree_structure,
    tree_transpose,
    tree_unflatten,
    treedef_children,
    treedef_is_leaf,
    treedef_tuple,
)

__all__ = [
    "Partial", "PyTreeDef", "all_leaves", "register_pytree_node",
    "register_pytree_node_class", "tree_all", "tree_flatten", "tree_leaves",
    "tree_map", "tree_reduce", "tree_structure", "tree_transpose",
    "tree_unflatten", "treedef_children", "treedef_is_leaf", "treedef_tuple",
]
