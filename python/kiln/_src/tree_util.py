"""Pytrees: flatten nested containers to a list of leaves plus a structure
(`PyTreeDef`) and rebuild them, with JAX's rules (tuple, list, dict with
sorted keys, None, namedtuple, OrderedDict, defaultdict, registered classes).

Pure Python; imports nothing from kiln. Flattening is on jit's per-call
dispatch path, so the common cases avoid generic machinery, and a treedef is
a nested tuple underneath so that its equality and hash run in C.
"""

import collections
import functools

__all__ = [
    "PyTreeDef", "tree_flatten", "tree_unflatten", "tree_map", "tree_leaves",
    "tree_structure", "tree_reduce", "tree_all", "register_pytree_node",
    "register_pytree_node_class", "treedef_is_leaf", "treedef_children",
    "treedef_tuple", "all_leaves", "tree_transpose", "Partial",
]


class _NodeType:
    """How one container type flattens: `flatten(x) -> (children, aux)` and
    `unflatten(aux, children) -> x`. `show(aux, child_texts)` renders it."""

    __slots__ = ("type", "flatten", "unflatten", "show")

    def __init__(self, type_, flatten, unflatten, show):
        self.type = type_
        self.flatten = flatten
        self.unflatten = unflatten
        self.show = show

    def __repr__(self):
        return f"<pytree node {self.type.__qualname__}>"


# A leaf's node in a treedef. Interior nodes are tuples
# (node_type, aux, children_nodes).
_LEAF = None
# Marks, in _kinds, a type known to be a leaf.
_IS_LEAF = object()


def _show_custom(name):
    def show(aux, texts):
        return f"CustomNode({name}[{aux!r}], [{', '.join(texts)}])"
    return show


def _sorted_keys(d):
    try:
        return tuple(sorted(d))
    except TypeError:
        raise ValueError(
            "pytree dict keys must be mutually sortable (kiln, like JAX, "
            f"orders dict children by key); got keys {list(d)!r}") from None


def _flatten_dict(d):
    keys = _sorted_keys(d)
    return [d[k] for k in keys], keys


def _flatten_ordered_dict(d):
    keys = tuple(d)
    return [d[k] for k in keys], keys


def _flatten_defaultdict(d):
    keys = _sorted_keys(d)
    return [d[k] for k in keys], (d.default_factory, keys)


_TUPLE = _NodeType(
    tuple, lambda x: (x, None), lambda aux, ch: tuple(ch),
    lambda aux, t: f"({t[0]},)" if len(t) == 1 else f"({', '.join(t)})")
_LIST = _NodeType(
    list, lambda x: (x, None), lambda aux, ch: list(ch),
    lambda aux, t: f"[{', '.join(t)}]")
_DICT = _NodeType(
    dict, _flatten_dict, lambda keys, ch: dict(zip(keys, ch)),
    lambda keys, t: "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(keys, t)) + "}")
_NONE = _NodeType(
    type(None), lambda x: ((), None), lambda aux, ch: None, lambda aux, t: "None")
_ORDERED_DICT = _NodeType(
    collections.OrderedDict, _flatten_ordered_dict,
    lambda keys, ch: collections.OrderedDict(zip(keys, ch)),
    _show_custom("OrderedDict"))
_DEFAULTDICT = _NodeType(
    collections.defaultdict, _flatten_defaultdict,
    lambda aux, ch: collections.defaultdict(aux[0], zip(aux[1], ch)),
    _show_custom("defaultdict"))

# type -> _NodeType or _IS_LEAF. Registered and builtin node types, plus every
# type seen so far (namedtuples get a node type, anything else is a leaf), so
# that classifying a value is one dict lookup.
_kinds = {t.type: t for t in (_TUPLE, _LIST, _DICT, _NONE, _ORDERED_DICT, _DEFAULTDICT)}
# The subset of _kinds that users registered or that are builtin.
_registered = dict(_kinds)


def _classify(t):
    if issubclass(t, tuple) and hasattr(t, "_fields"):
        kind = _NodeType(t, lambda x: (x, None),
                         lambda aux, ch, t=t: t(*ch),
                         _show_custom("namedtuple"))
        # The namedtuple's name is its metadata when printing.
        kind.show = lambda aux, texts, name=t.__name__: (
            f"CustomNode(namedtuple[{name}], [{', '.join(texts)}])")
    else:
        kind = _IS_LEAF
    _kinds[t] = kind
    return kind


def register_pytree_node(nodetype, flatten_func, unflatten_func):
    """Make instances of exactly `nodetype` pytree nodes.
    `flatten_func(x) -> (children, aux_data)`; `unflatten_func(aux_data,
    children) -> x`. aux_data must be hashable and comparable: it becomes part
    of the treedef, hence of jit's cache key."""
    if not isinstance(nodetype, type):
        raise TypeError(f"register_pytree_node: expected a class, got {nodetype!r}")
    if nodetype in _registered:
        raise ValueError(
            f"register_pytree_node: {nodetype.__qualname__} is already registered "
            "as a pytree node")

    def flatten(x):
        children, aux = flatten_func(x)
        if type(children) is not tuple and type(children) is not list:
            children = tuple(children)
        return children, aux

    kind = _NodeType(nodetype, flatten, unflatten_func,
                     _show_custom(nodetype.__qualname__))
    _registered[nodetype] = kind
    _kinds[nodetype] = kind


def register_pytree_node_class(cls):
    """Class decorator: registers `cls` with `x.tree_flatten()` and the
    classmethod `cls.tree_unflatten(aux_data, children)`. Returns `cls`."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


# ---------------------------------------------------------------------------
# Flatten / unflatten.

def _flatten(x, leaves):
    kind = _kinds.get(type(x))
    if kind is None:
        kind = _classify(type(x))
    if kind is _IS_LEAF:
        leaves.append(x)
        return _LEAF
    children, aux = kind.flatten(x)
    nodes = []
    for c in children:
        ck = _kinds.get(type(c))
        if ck is _IS_LEAF:  # fast path for the common leaf child
            leaves.append(c)
            nodes.append(_LEAF)
        else:
            nodes.append(_flatten(c, leaves))
    return (kind, aux, tuple(nodes))


def _flatten_is_leaf(x, leaves, is_leaf):
    if is_leaf(x):
        leaves.append(x)
        return _LEAF
    kind = _kinds.get(type(x))
    if kind is None:
        kind = _classify(type(x))
    if kind is _IS_LEAF:
        leaves.append(x)
        return _LEAF
    children, aux = kind.flatten(x)
    return (kind, aux, tuple([_flatten_is_leaf(c, leaves, is_leaf) for c in children]))


def tree_flatten(tree, is_leaf=None):
    """(leaves, treedef): the leaves of `tree` in order, and its structure.
    `is_leaf(subtree) -> bool` can stop the descent at chosen subtrees."""
    leaves = []
    if is_leaf is None:
        node = _flatten(tree, leaves)
    else:
        node = _flatten_is_leaf(tree, leaves, is_leaf)
    treedef = object.__new__(PyTreeDef)
    treedef._node = node
    treedef._num_leaves = len(leaves)
    treedef._hash = None
    return leaves, treedef


def _unflatten(node, it):
    """Rebuild an interior node, pulling leaves from iterator `it`."""
    kind, aux, children = node
    return kind.unflatten(
        aux, [next(it) if c is _LEAF else _unflatten(c, it) for c in children])


def _make_treedef(node, num_leaves):
    treedef = object.__new__(PyTreeDef)
    treedef._node = node
    treedef._num_leaves = num_leaves
    treedef._hash = None
    return treedef


def _count_leaves(node):
    if node is _LEAF:
        return 1
    return sum(_count_leaves(c) for c in node[2])


def _count_nodes(node):
    if node is _LEAF:
        return 1
    return 1 + sum(_count_nodes(c) for c in node[2])


def _show(node):
    if node is _LEAF:
        return "*"
    kind, aux, children = node
    return kind.show(aux, [_show(c) for c in children])


class _StructureMismatch(Exception):
    """Internal: where and how flatten_up_to found a different structure."""


def _path_text(path):
    return "".join(path) if path else "(root)"


def _up_to(node, x, out, path):
    if node is _LEAF:
        out.append(x)
        return
    kind, aux, children = node
    x_kind = _kinds.get(type(x))
    if x_kind is None:
        x_kind = _classify(type(x))
    if x_kind is not kind:
        got = "a leaf" if x_kind is _IS_LEAF else f"a {type(x).__qualname__}"
        raise _StructureMismatch(
            f"at {_path_text(path)}: expected a {kind.type.__qualname__}, got {got}")
    x_children, x_aux = kind.flatten(x)
    if len(x_children) != len(children):
        raise _StructureMismatch(
            f"at {_path_text(path)}: expected a {kind.type.__qualname__} with "
            f"{len(children)} children, got {len(x_children)}")
    if x_aux != aux:
        raise _StructureMismatch(
            f"at {_path_text(path)}: {kind.type.__qualname__} metadata differs: "
            f"expected {aux!r}, got {x_aux!r}")
    keys = aux if kind is _DICT or kind is _ORDERED_DICT else None
    for i, (child_node, child) in enumerate(zip(children, x_children)):
        path.append(f"[{keys[i]!r}]" if keys is not None else f"[{i}]")
        _up_to(child_node, child, out, path)
        path.pop()


class PyTreeDef:
    """The structure of a pytree: its containers, their metadata, and where the
    leaves go. Immutable; equality and hash are exact and cheap (jit's cache
    keys on them)."""

    __slots__ = ("_node", "_num_leaves", "_hash")

    def __init__(self, *args, **kwargs):
        raise TypeError("PyTreeDef is created by tree_flatten / tree_structure")

    @property
    def num_leaves(self):
        return self._num_leaves

    @property
    def num_nodes(self):
        return _count_nodes(self._node)

    def unflatten(self, leaves):
        """Build the pytree of this structure holding `leaves` (in order)."""
        if type(leaves) is not list and type(leaves) is not tuple:
            leaves = list(leaves)
        if len(leaves) != self._num_leaves:
            few = "few" if len(leaves) < self._num_leaves else "many"
            raise ValueError(
                f"Too {few} leaves for {self!r}: expected {self._num_leaves}, "
                f"got {len(leaves)}")
        if self._node is _LEAF:
            return leaves[0]
        return _unflatten(self._node, iter(leaves))

    def flatten_up_to(self, tree):
        """The subtrees of `tree` at this structure's leaf positions; `tree`
        must have this structure as a prefix, else ValueError."""
        out = []
        try:
            _up_to(self._node, tree, out, [])
        except _StructureMismatch as exc:
            _, other = tree_flatten(tree)
            raise ValueError(
                f"pytree structure mismatch {exc}.\n  expected structure: {self!r}"
                f"\n  got structure:      {other!r}") from None
        return out

    def children(self):
        """The treedefs of the root's children (empty for a leaf)."""
        if self._node is _LEAF:
            return []
        return [_make_treedef(c, _count_leaves(c)) for c in self._node[2]]

    def node_data(self):
        """(type, aux_data) of the root node, or None for a leaf."""
        if self._node is _LEAF:
            return None
        kind, aux, _ = self._node
        return kind.type, aux

    def __eq__(self, other):
        if self is other:
            return True
        if type(other) is not PyTreeDef:
            return NotImplemented
        return self._num_leaves == other._num_leaves and self._node == other._node

    def __ne__(self, other):
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __hash__(self):
        h = self._hash
        if h is None:
            try:
                h = hash(self._node)
            except TypeError as exc:
                raise TypeError(
                    f"{self!r} is not hashable: a registered pytree node returned "
                    f"unhashable aux_data ({exc}); make aux_data hashable, e.g. a "
                    "tuple instead of a list") from None
            self._hash = h
        return h

    def __repr__(self):
        return f"PyTreeDef({_show(self._node)})"


def tree_unflatten(treedef, leaves):
    return treedef.unflatten(leaves)


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def tree_map(f, tree, *rest, is_leaf=None):
    """Apply `f` to corresponding leaves of `tree` and `rest`; each of `rest`
    must have `tree`'s structure (or `tree` as a prefix: its subtrees at
    `tree`'s leaves are passed whole)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    if not rest:
        return treedef.unflatten([f(x) for x in leaves])
    columns = [leaves]
    for i, other in enumerate(rest):
        try:
            columns.append(treedef.flatten_up_to(other))
        except ValueError as exc:
            raise ValueError(
                f"tree_map: tree #{i + 2} does not match the structure of "
                f"tree #1: {exc}") from None
    return treedef.unflatten([f(*xs) for xs in zip(*columns)])


_NO_INITIALIZER = object()


def tree_reduce(function, tree, initializer=_NO_INITIALIZER, is_leaf=None):
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _NO_INITIALIZER:
        if not leaves:
            raise TypeError("tree_reduce of a tree with no leaves and no initializer")
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def tree_all(tree, *, is_leaf=None):
    return all(tree_leaves(tree, is_leaf))


def treedef_is_leaf(treedef):
    return treedef._node is _LEAF


def treedef_children(treedef):
    return treedef.children()


def treedef_tuple(treedefs):
    """The treedef of a tuple whose children have the given treedefs."""
    treedefs = list(treedefs)
    return _make_treedef((_TUPLE, None, tuple(t._node for t in treedefs)),
                         sum(t._num_leaves for t in treedefs))


def all_leaves(iterable, is_leaf=None):
    """True if every element of `iterable` is a leaf."""
    for x in iterable:
        if not treedef_is_leaf(tree_structure(x, is_leaf)):
            return False
    return True


def tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose):
    """Turn a tree of trees (outer of inner) into a tree of trees (inner of
    outer), as jax.tree_util.tree_transpose."""
    flat = outer_treedef.flatten_up_to(pytree_to_transpose)
    columns = [inner_treedef.flatten_up_to(x) for x in flat]
    transposed = [outer_treedef.unflatten(list(col)) for col in zip(*columns)]
    if inner_treedef.num_leaves == 0:
        transposed = []
    return inner_treedef.unflatten(transposed)


class Partial(functools.partial):
    """A functools.partial that is a pytree: its bound arguments are leaves
    and the function is static structure (so it can be passed through jit).
    Partial(Partial(f, a), b) merges into Partial(f, a, b), as functools does."""


register_pytree_node(
    Partial,
    lambda p: ((p.args, p.keywords), p.func),
    lambda func, xs: Partial(func, *xs[0], **xs[1]),
)
