"""Pytrees: flatten nested containers to a list of leaves plus a structure
(`PyTreeDef`) and rebuild them, with JAX's rules (tuple, list, dict with
sorted keys, None, namedtuple, OrderedDict, defaultdict, registered classes),
and name each leaf by its key path (`DictKey`, `SequenceKey`, ...).

Pure Python; imports nothing from kiln. Flattening is on jit's per-call
dispatch path, so the common cases avoid generic machinery, and a treedef is
a nested tuple underneath so that its equality and hash run in C. Key paths
are built only by the *_with_path functions, never on that path.
"""

import collections
import dataclasses
import functools
import itertools
import operator
import types
from typing import Any

from kiln import _kiln

__all__ = [
    "PyTreeDef", "tree_flatten", "tree_unflatten", "tree_map", "tree_leaves",
    "tree_structure", "tree_reduce", "tree_reduce_associative", "tree_all",
    "tree_broadcast", "tree_transpose", "tree_flatten_with_path",
    "tree_leaves_with_path", "tree_map_with_path", "keystr", "DictKey",
    "SequenceKey", "GetAttrKey", "FlattenedIndexKey", "KeyEntry", "KeyPath",
    "register_pytree_node", "register_pytree_node_class",
    "register_pytree_with_keys", "register_pytree_with_keys_class",
    "register_dataclass", "register_static", "is_tree_node",
    "flatten_one_level", "flatten_one_level_with_keys", "treedef_is_leaf",
    "treedef_children", "treedef_tuple", "all_leaves", "Partial",
]


# ---------------------------------------------------------------------------
# Key paths: a leaf's path is a tuple of key entries, one per node on the way
# down from the root.

class _KeyEntry:
    """One step of a key path. Immutable; equal when the class and the value
    are. Subclasses name the value (`__match_args__`) and print themselves
    the way `keystr` shows them."""

    __slots__ = ("_value",)
    _accepts = object  # the type a subclass's value must have

    def _set(self, value):
        if self._accepts is int and not isinstance(value, int):
            try:
                value = operator.index(value)  # e.g. a NumPy integer
            except TypeError:
                pass
        if not isinstance(value, self._accepts):
            raise TypeError(
                f"{type(self).__name__}: {self.__match_args__[0]} must be "
                f"{self._accepts.__name__}, got {type(value).__name__}")
        object.__setattr__(self, "_value", value)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __eq__(self, other):
        return type(other) is type(self) and other._value == self._value

    def __hash__(self):
        return hash(self._value)

    def __repr__(self):
        return f"{type(self).__name__}({self.__match_args__[0]}={self._value!r})"

    def __reduce__(self):
        return type(self), (self._value,)


class DictKey(_KeyEntry):
    """A dict-like node's child, by key: prints as `['a']`."""
    __slots__ = ()
    __match_args__ = ("key",)
    key = property(lambda self: self._value)

    def __init__(self, key):
        self._set(key)

    def __str__(self):
        return f"[{self._value!r}]"


class SequenceKey(_KeyEntry):
    """A tuple's or list's child, by position: prints as `[0]`."""
    __slots__ = ()
    __match_args__ = ("idx",)
    _accepts = int
    idx = property(lambda self: self._value)

    def __init__(self, idx):
        self._set(idx)

    def __str__(self):
        return f"[{self._value}]"


class GetAttrKey(_KeyEntry):
    """A namedtuple's or dataclass's child, by attribute: prints as `.x`."""
    __slots__ = ()
    __match_args__ = ("name",)
    _accepts = str
    name = property(lambda self: self._value)

    def __init__(self, name):
        self._set(name)

    def __str__(self):
        return f".{self._value}"


class FlattenedIndexKey(_KeyEntry):
    """A child of a node registered without keys, by its position among the
    flattened children: prints as `[<flat index 0>]`."""
    __slots__ = ()
    __match_args__ = ("key",)
    _accepts = int
    key = property(lambda self: self._value)

    def __init__(self, key):
        self._set(key)

    def __str__(self):
        return f"[<flat index {self._value}>]"


KeyEntry = Any
KeyPath = tuple


def keystr(keys, *, simple=False, separator=""):
    """A key path as text: `['a'][0].x` by default; with simple=True only the
    bare keys (`a`, `0`, `x`), which can be ambiguous, joined by `separator`."""
    if simple:
        return separator.join(
            str(k._value) if isinstance(k, _KeyEntry) else str(k) for k in keys)
    return separator.join(map(str, keys))


# ---------------------------------------------------------------------------
# Node types.

class _NodeType:
    """How one container type flattens: `flatten(x) -> (children, aux)`,
    `unflatten(aux, children) -> x`, `flatten_with_keys(x) -> ([(key, child),
    ...], aux)` with the same children and aux, and `show(aux, child_texts)`
    renders it inside a PyTreeDef's repr."""

    __slots__ = ("type", "flatten", "unflatten", "show", "flatten_with_keys")

    def __init__(self, type_, flatten, unflatten, show, flatten_with_keys):
        self.type = type_
        self.flatten = flatten
        self.unflatten = unflatten
        self.show = show
        self.flatten_with_keys = flatten_with_keys

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


def _with_keys(flatten, keys_of):
    """A flatten_with_keys built from `flatten` and `keys_of(x, aux)`, which
    gives the key entries of the children in order."""
    def flatten_with_keys(x):
        children, aux = flatten(x)
        return list(zip(keys_of(x, aux), children)), aux
    return flatten_with_keys


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


def _flatten_sequence(x):
    return x, None


def _positions(x, aux):
    return map(SequenceKey, range(len(x)))


def _dict_keys(x, keys):
    return map(DictKey, keys)


_TUPLE = _NodeType(
    tuple, _flatten_sequence, lambda aux, ch: tuple(ch),
    lambda aux, t: f"({t[0]},)" if len(t) == 1 else f"({', '.join(t)})",
    _with_keys(_flatten_sequence, _positions))
_LIST = _NodeType(
    list, _flatten_sequence, lambda aux, ch: list(ch),
    lambda aux, t: f"[{', '.join(t)}]",
    _with_keys(_flatten_sequence, _positions))
_DICT = _NodeType(
    dict, _flatten_dict, lambda keys, ch: dict(zip(keys, ch)),
    lambda keys, t: "{" + ", ".join(f"{k!r}: {v}" for k, v in zip(keys, t)) + "}",
    _with_keys(_flatten_dict, _dict_keys))
_NONE = _NodeType(
    type(None), lambda x: ((), None), lambda aux, ch: None, lambda aux, t: "None",
    lambda x: ([], None))
_ORDERED_DICT = _NodeType(
    collections.OrderedDict, _flatten_ordered_dict,
    lambda keys, ch: collections.OrderedDict(zip(keys, ch)),
    _show_custom("OrderedDict"), _with_keys(_flatten_ordered_dict, _dict_keys))
_DEFAULTDICT = _NodeType(
    collections.defaultdict, _flatten_defaultdict,
    lambda aux, ch: collections.defaultdict(aux[0], zip(aux[1], ch)),
    _show_custom("defaultdict"),
    _with_keys(_flatten_defaultdict, lambda x, aux: map(DictKey, aux[1])))

# type -> _NodeType or _IS_LEAF. Registered and builtin node types, plus every
# type seen so far (namedtuples get a node type, anything else is a leaf), so
# that classifying a value is one dict lookup.
_kinds = {t.type: t for t in (_TUPLE, _LIST, _DICT, _NONE, _ORDERED_DICT, _DEFAULTDICT)}
# The subset of _kinds that users registered or that are builtin.
_registered = dict(_kinds)
_registry = _registered  # (JAX's name: flax nnx asks whether a type is registered)
# The same table as users see it (the public functions at the end of this file): a type
# registered with register_boundary_node is a leaf here and a node in _kinds. Both tables
# share their kind objects, so the treedefs of both views compare equal where they agree.
_public_kinds = dict(_kinds)


def _classify(t):
    if issubclass(t, tuple) and hasattr(t, "_fields"):
        kind = _NodeType(
            t, _flatten_sequence, lambda aux, ch, t=t: t(*ch),
            _show_custom("namedtuple"),
            _with_keys(_flatten_sequence, lambda x, aux: map(GetAttrKey, type(x)._fields)))
        # A namedtuple prints its class name where other nodes print aux.
        kind.show = lambda aux, texts, name=t.__name__: (
            f"CustomNode(namedtuple[{name}], [{', '.join(texts)}])")
    else:
        kind = _IS_LEAF
    _kinds[t] = kind
    _public_kinds[t] = kind
    return kind


def _kind_of(x):
    kind = _kinds.get(type(x))
    return _classify(type(x)) if kind is None else kind


# ---------------------------------------------------------------------------
# Registration.

def register_pytree_node(nodetype, flatten_func, unflatten_func,
                         flatten_with_keys_func=None):
    """Make instances of exactly `nodetype` pytree nodes.
    `flatten_func(x) -> (children, aux_data)`; `unflatten_func(aux_data,
    children) -> x`. aux_data must be hashable and comparable: it becomes part
    of the treedef, hence of jit's cache key. Without
    `flatten_with_keys_func(x) -> ([(key, child), ...], aux_data)`, the
    children's key paths are `FlattenedIndexKey(i)`."""
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

    if flatten_with_keys_func is None:
        flatten_with_keys = _with_keys(
            flatten, lambda x, aux: map(FlattenedIndexKey, itertools.count()))
    else:
        def flatten_with_keys(x):
            keyed, aux = flatten_with_keys_func(x)
            return list(keyed), aux

    kind = _NodeType(nodetype, flatten, unflatten_func,
                     _show_custom(nodetype.__name__), flatten_with_keys)
    _registered[nodetype] = kind
    _kinds[nodetype] = kind
    _public_kinds[nodetype] = kind


_boundary_kinds = set()  # the kinds of register_boundary_node's types


def boundary_leaves(treedef):
    """For each leaf of `treedef`, whether it is the child of a boundary node (a typed key array's
    data: its last axis is the key's own, so vmap counts negative axes from the one before)."""
    out = []

    def walk(node, under):
        if node is _LEAF:
            out.append(under)
            return
        inner = node[0] in _boundary_kinds
        for c in node[2]:
            walk(c, inner)
    walk(treedef._node, False)
    return out


def register_boundary_node(nodetype, flatten_func, unflatten_func):
    """Make instances of `nodetype` leaves to users (kiln.tree_util, kiln.tree) and nodes to
    kiln's transformations, which flatten with this module's own functions: a typed key array
    is one leaf to a library and its uint32 data to jit, vmap, grad and the loops, rebuilt by
    `unflatten_func` on the way out (which also sees whatever else a transformation puts at
    the data's place: tracers, axis numbers, abstract values)."""
    register_pytree_node(nodetype, flatten_func, unflatten_func)
    _boundary_kinds.add(_kinds[nodetype])
    _public_kinds[nodetype] = _IS_LEAF
    del _registered[nodetype]  # not a node in the registry libraries read (flax nnx: a key is a leaf)


def register_pytree_node_class(cls):
    """Class decorator: registers `cls` with `x.tree_flatten()` and the
    classmethod `cls.tree_unflatten(aux_data, children)`. Returns `cls`."""
    register_pytree_node(cls, lambda x: x.tree_flatten(), cls.tree_unflatten)
    return cls


def register_pytree_with_keys(nodetype, flatten_with_keys, unflatten_func,
                              flatten_func=None):
    """Like register_pytree_node, but the children carry their own key path
    entries: `flatten_with_keys(x) -> ([(key, child), ...], aux_data)`.
    `flatten_func`, if given, must return the same children and aux_data; it
    only saves building keys when no path is asked for."""
    if flatten_func is None:
        def flatten_func(x):
            keyed, aux = flatten_with_keys(x)
            return [child for _, child in keyed], aux
    register_pytree_node(nodetype, flatten_func, unflatten_func, flatten_with_keys)


def register_pytree_with_keys_class(cls):
    """Class decorator: registers `cls` with `x.tree_flatten_with_keys()`,
    `cls.tree_unflatten(aux_data, children)`, and `x.tree_flatten()` if the
    class has it. Returns `cls`."""
    flatten = (lambda x: x.tree_flatten()) if hasattr(cls, "tree_flatten") else None
    register_pytree_with_keys(cls, lambda x: x.tree_flatten_with_keys(),
                              cls.tree_unflatten, flatten)
    return cls


def register_dataclass(nodetype, data_fields=None, meta_fields=None, drop_fields=()):
    """Register a dataclass-like class: `data_fields` are children (key path
    `GetAttrKey(name)`), `meta_fields` are static (a tuple of their values is
    the aux_data, so they must be hashable). For a dataclass both may be left
    out: fields whose metadata has `static=True` (`kiln.tree.static()`) are
    meta, the rest data. Rebuilt as `nodetype(**fields)`. Returns `nodetype`,
    so it works as a decorator."""
    if data_fields is None or meta_fields is None:
        if (data_fields is None) != (meta_fields is None):
            raise TypeError(
                "register_dataclass: data_fields and meta_fields must both be specified"
                f" when either is specified. Got {data_fields=} {meta_fields=}.")
        if not dataclasses.is_dataclass(nodetype):
            raise TypeError(
                "register_dataclass: data_fields and meta_fields are required when"
                f" nodetype is not a dataclass. Got {nodetype=}.")
        fields = dataclasses.fields(nodetype)
        data_fields = [f.name for f in fields if not f.metadata.get("static", False)]
        meta_fields = [f.name for f in fields if f.metadata.get("static", False)]
    # Tuples: the closures below must not see later edits to the caller's lists.
    data_fields, meta_fields = tuple(data_fields), tuple(meta_fields)
    named = {*data_fields, *meta_fields}
    if dataclasses.is_dataclass(nodetype):
        init_fields = {f.name for f in dataclasses.fields(nodetype) if f.init}
        init_fields.difference_update(drop_fields)
        if named != init_fields:
            msg = ("data_fields and meta_fields must include all dataclass fields with"
                   " ``init=True`` and only them.")
            if init_fields - named:
                msg += (f" Missing fields: {init_fields - named}. Add them to drop_fields"
                        " to suppress this error.")
            if named - init_fields:
                msg += f" Unexpected fields: {named - init_fields}."
            raise ValueError(msg)
    overlap = set(data_fields) & set(meta_fields)
    if overlap:
        raise ValueError(
            f"data_fields and meta_fields must not overlap. Overlapping fields: {overlap}.")

    def flatten(x):
        return (tuple(getattr(x, name) for name in data_fields),
                tuple(getattr(x, name) for name in meta_fields))

    def unflatten(meta, data):
        return nodetype(**dict(zip(meta_fields, meta)), **dict(zip(data_fields, data)))

    register_pytree_node(nodetype, flatten, unflatten,
                         _with_keys(flatten, lambda x, aux: map(GetAttrKey, data_fields)))
    return nodetype


def static(**kwargs):
    """`dataclasses.field(**kwargs)` marked static for register_dataclass."""
    metadata = {"static": True, **(kwargs.pop("metadata", None) or {})}
    return dataclasses.field(metadata=metadata, **kwargs)


def register_static(cls):
    """Register `cls` as a node with no children whose instances are their own
    aux_data: static under jit, so they must be hashable. Returns `cls`."""
    register_pytree_with_keys(cls, lambda x: ((), x), lambda x, children: x)
    return cls


def is_tree_node(typ):
    """True if instances of `typ` are pytree nodes (builtin, registered, or a
    namedtuple), not leaves."""
    kind = _kinds.get(typ)
    return (_classify(typ) if kind is None else kind) is not _IS_LEAF


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


# The same two walks in C (python/ext/pytree.c), over these tables: dispatch time.
_kiln.tree_setup(_kinds, _IS_LEAF, _TUPLE, _LIST, _DICT, _NONE, _classify)
_c_flatten, _c_unflatten, _c_hash = _kiln.tree_flatten, _kiln.tree_unflatten, _kiln.tree_hash


def _flatten_is_leaf(x, leaves, is_leaf):
    if is_leaf(x):
        leaves.append(x)
        return _LEAF
    kind = _kind_of(x)
    if kind is _IS_LEAF:
        leaves.append(x)
        return _LEAF
    children, aux = kind.flatten(x)
    return (kind, aux, tuple([_flatten_is_leaf(c, leaves, is_leaf) for c in children]))


def _flatten_with_path(x, path, pairs, is_leaf):
    """Like _flatten, appending (key path, leaf) pairs; `is_leaf(path, x)`."""
    if is_leaf is not None and is_leaf(path, x):
        pairs.append((path, x))
        return _LEAF
    kind = _kind_of(x)
    if kind is _IS_LEAF:
        pairs.append((path, x))
        return _LEAF
    keyed, aux = kind.flatten_with_keys(x)
    return (kind, aux, tuple([_flatten_with_path(c, (*path, k), pairs, is_leaf)
                              for k, c in keyed]))


def _make_treedef(node, num_leaves):
    treedef = object.__new__(PyTreeDef)
    treedef._node = node
    treedef._num_leaves = num_leaves
    treedef._hash = None
    return treedef


def tree_flatten(tree, is_leaf=None):
    """(leaves, treedef): the leaves of `tree` in order, and its structure.
    `is_leaf(subtree) -> bool` can stop the descent at chosen subtrees."""
    leaves = []
    node = _c_flatten(tree, leaves, is_leaf, _kinds)  # (the public view's own _kinds there)
    return leaves, _make_treedef(node, len(leaves))


def tree_flatten_with_path(tree, is_leaf=None, is_leaf_takes_path=False):
    """([(key_path, leaf), ...], treedef), the treedef being tree_flatten's.
    `is_leaf(subtree)`, or `is_leaf(key_path, subtree)` if is_leaf_takes_path,
    can stop the descent."""
    if is_leaf is not None and not is_leaf_takes_path:
        is_leaf_of_value = is_leaf
        is_leaf = lambda path, x: is_leaf_of_value(x)  # noqa: E731
    pairs = []
    node = _flatten_with_path(tree, (), pairs, is_leaf)
    return pairs, _make_treedef(node, len(pairs))


def _unflatten(node, it):
    """Rebuild an interior node, pulling leaves from iterator `it`."""
    kind, aux, children = node
    return kind.unflatten(
        aux, [next(it) if c is _LEAF else _unflatten(c, it) for c in children])


def _count_leaves(node):
    if node is _LEAF:
        return 1
    return sum(_count_leaves(c) for c in node[2])


def _count_nodes(node):
    if node is _LEAF:
        return 1
    return 1 + sum(_count_nodes(c) for c in node[2])


def _compose(node, inner):
    if node is _LEAF:
        return inner
    kind, aux, children = node
    return (kind, aux, tuple(_compose(c, inner) for c in children))


def _show(node):
    if node is _LEAF:
        return "*"
    kind, aux, children = node
    return kind.show(aux, [_show(c) for c in children])


class _StructureMismatch(Exception):
    """Internal: what flatten_up_to found different, and the child positions
    leading to it (turned into a key path only when reporting)."""

    def __init__(self, what, positions):
        super().__init__(what)
        self.what = what
        self.positions = list(positions)


def _key_path_to(tree, positions):
    """The key path of the subtree reached from `tree` by child positions."""
    path = []
    for i in positions:
        keyed, _ = _kind_of(tree).flatten_with_keys(tree)
        key, tree = keyed[i]
        path.append(key)
    return tuple(path)


def _up_to(node, x, out, positions):
    if node is _LEAF:
        out.append(x)
        return
    kind, aux, children = node
    x_kind = _kind_of(x)
    if x_kind is not kind:
        got = "a leaf" if x_kind is _IS_LEAF else f"a {type(x).__qualname__}"
        raise _StructureMismatch(f"expected a {kind.type.__qualname__}, got {got}", positions)
    x_children, x_aux = kind.flatten(x)
    if len(x_children) != len(children):
        raise _StructureMismatch(
            f"expected a {kind.type.__qualname__} with {len(children)} children, "
            f"got {len(x_children)}", positions)
    if x_aux != aux:
        raise _StructureMismatch(
            f"{kind.type.__qualname__} metadata differs: expected {aux!r}, got {x_aux!r}",
            positions)
    for i, (child_node, child) in enumerate(zip(children, x_children)):
        positions.append(i)
        _up_to(child_node, child, out, positions)
        positions.pop()


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
        """Leaves plus containers (None and empty containers count)."""
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
        return _c_unflatten(self._node, leaves)

    def flatten_up_to(self, tree):
        """The subtrees of `tree` at this structure's leaf positions; `tree`
        must have this structure as a prefix, else ValueError."""
        out = []
        try:
            _up_to(self._node, tree, out, [])
        except _StructureMismatch as exc:
            where = keystr(_key_path_to(tree, exc.positions)) or "(root)"
            _, other = tree_flatten(tree)
            raise ValueError(
                f"pytree structure mismatch at {where}: {exc.what}.\n"
                f"  expected structure: {self!r}\n  got structure:      {other!r}") from None
        return out

    def children(self):
        """The treedefs of the root's children (empty for a leaf)."""
        if self._node is _LEAF:
            return []
        return [_make_treedef(c, _count_leaves(c)) for c in self._node[2]]

    def node_data(self):
        """(type, aux_data) of the root node, or None for a leaf. A dict's
        aux_data is its sorted keys, as a list (as in JAX)."""
        if self._node is _LEAF:
            return None
        kind, aux, _ = self._node
        return kind.type, (list(aux) if kind is _DICT else aux)

    def compose(self, inner):
        """The structure of this tree with an `inner`-shaped tree at each leaf."""
        return _make_treedef(_compose(self._node, inner._node),
                             self._num_leaves * inner._num_leaves)

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
        # the containers and dict keys; aux_data is compared by == but not hashed (as JAX): a
        # library's (flax's GraphDef) costs microseconds to hash, and jit hashes every call's
        h = self._hash
        if h is None:
            h = self._hash = _c_hash(self._node)
        return h

    def __repr__(self):
        return f"PyTreeDef({_show(self._node)})"


# ---------------------------------------------------------------------------
# Functions of trees.

def tree_unflatten(treedef, leaves):
    return treedef.unflatten(leaves)


def tree_leaves(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[0]


def tree_leaves_with_path(tree, is_leaf=None, is_leaf_takes_path=False):
    """[(key_path, leaf), ...] of `tree`, in tree_leaves's order."""
    return tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)[0]


def tree_structure(tree, is_leaf=None):
    return tree_flatten(tree, is_leaf)[1]


def _subtrees_of_rest(treedef, rest, api):
    """For each tree in `rest`, its subtrees at `treedef`'s leaves (which must
    be a prefix of it); a mismatch names `api` and the tree's position."""
    columns = []
    for i, other in enumerate(rest):
        try:
            columns.append(treedef.flatten_up_to(other))
        except ValueError as exc:
            raise ValueError(
                f"{api}: tree #{i + 2} does not match the structure of "
                f"tree #1: {exc}") from None
    return columns


def tree_map(f, tree, *rest, is_leaf=None):
    """Apply `f` to corresponding leaves of `tree` and `rest`; each of `rest`
    must have `tree`'s structure (or `tree` as a prefix: its subtrees at
    `tree`'s leaves are passed whole)."""
    leaves, treedef = tree_flatten(tree, is_leaf)
    if not rest:
        return treedef.unflatten([f(x) for x in leaves])
    columns = _subtrees_of_rest(treedef, rest, "tree_map")
    return treedef.unflatten([f(*xs) for xs in zip(leaves, *columns)])


def tree_map_with_path(f, tree, *rest, is_leaf=None, is_leaf_takes_path=False):
    """tree_map, calling `f(key_path, leaf, *leaves_of_rest)`."""
    pairs, treedef = tree_flatten_with_path(tree, is_leaf, is_leaf_takes_path)
    columns = _subtrees_of_rest(treedef, rest, "tree_map_with_path")
    return treedef.unflatten(
        [f(path, x, *xs) for (path, x), *xs in zip(pairs, *columns)])


def tree_broadcast(prefix_tree, full_tree, is_leaf=None):
    """`full_tree`'s structure, each leaf replaced by the leaf of `prefix_tree`
    (a prefix of it) above it. `is_leaf` applies to `prefix_tree`."""
    prefix_leaves, prefix_def = tree_flatten(prefix_tree, is_leaf)
    [subtrees] = _subtrees_of_rest(prefix_def, [full_tree], "tree_broadcast")
    leaves = []
    for x, subtree in zip(prefix_leaves, subtrees):
        leaves.extend([x] * len(tree_leaves(subtree)))
    return tree_structure(full_tree).unflatten(leaves)


_NO_INITIALIZER = object()


def tree_reduce(function, tree, initializer=_NO_INITIALIZER, is_leaf=None):
    leaves = tree_leaves(tree, is_leaf)
    if initializer is _NO_INITIALIZER:
        if not leaves:
            raise TypeError("tree_reduce of a tree with no leaves and no initializer")
        return functools.reduce(function, leaves)
    return functools.reduce(function, leaves, initializer)


def _reduce_halves(leaves, operation):
    if len(leaves) == 1:
        return leaves[0]
    half = len(leaves) // 2
    return operation(_reduce_halves(leaves[:half], operation),
                     _reduce_halves(leaves[half:], operation))


def tree_reduce_associative(operation, tree, *, identity=_NO_INITIALIZER, is_leaf=None):
    """Reduce the leaves with an associative `operation` as a balanced tree
    (each half reduced, then the halves combined); `identity` is returned for
    a tree with no leaves."""
    leaves = tree_leaves(tree, is_leaf)
    if leaves:
        return _reduce_halves(leaves, operation)
    if identity is _NO_INITIALIZER:
        raise TypeError("Must specify identity for parallel reduction of empty sequence.")
    return identity


def tree_all(tree, *, is_leaf=None):
    return all(tree_leaves(tree, is_leaf))


def flatten_one_level_with_keys(tree):
    """([(key, child), ...], aux_data) of the root node of `tree`."""
    kind = _kind_of(tree)
    if kind is _IS_LEAF:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    return kind.flatten_with_keys(tree)


def flatten_one_level(tree):
    """(children, aux_data) of the root node of `tree`; ValueError for a leaf."""
    kind = _kind_of(tree)
    if kind is _IS_LEAF:
        raise ValueError(f"can't tree-flatten type: {type(tree)}")
    return kind.flatten(tree)


def treedef_is_leaf(treedef):
    """True if `treedef` has a single node: a leaf, None, or an empty container."""
    return treedef._node is _LEAF or not treedef._node[2]


def treedef_children(treedef):
    return treedef.children()


def treedef_tuple(treedefs):
    """The treedef of a tuple whose children have the given treedefs."""
    treedefs = list(treedefs)
    return _make_treedef((_TUPLE, None, tuple(t._node for t in treedefs)),
                         sum(t._num_leaves for t in treedefs))


def all_leaves(iterable, is_leaf=None):
    """True if every element of `iterable` is a leaf (None is not: it is an
    empty node). With `is_leaf`, true if flattening the elements as a list
    gives back exactly those elements."""
    if is_leaf is None:
        return all(_kind_of(x) is _IS_LEAF for x in iterable)
    items = list(iterable)
    leaves = tree_leaves(items, is_leaf)
    return len(leaves) == len(items) and all(a is b for a, b in zip(items, leaves))


def tree_transpose(outer_treedef, inner_treedef, pytree_to_transpose):
    """Turn a tree of trees (outer of inner) into a tree of trees (inner of
    outer). `inner_treedef` None: the structure of the first inner tree.
    TypeError unless the leaf count is outer's times inner's."""
    leaves, treedef = tree_flatten(pytree_to_transpose)
    if inner_treedef is None:
        inner_treedef = tree_structure(outer_treedef.flatten_up_to(pytree_to_transpose)[0])
    n_inner, n_outer = inner_treedef.num_leaves, outer_treedef.num_leaves
    if len(leaves) != n_inner * n_outer:
        raise TypeError(f"Mismatch\n{treedef}\n != \n{outer_treedef.compose(inner_treedef)}")
    rows = [leaves[i * n_inner:(i + 1) * n_inner] for i in range(n_outer)]
    return inner_treedef.unflatten([outer_treedef.unflatten(column) for column in zip(*rows)])


# ---------------------------------------------------------------------------
# Partial.

class _BoundPartial:
    """Stands for a functools.partial passed to Partial, so that functools does
    not merge the two: the inner partial's arguments stay part of the static
    function rather than becoming leaves. Compares and hashes as that partial,
    and shows its func/args/keywords."""

    __slots__ = ("partial", "func", "args", "keywords")

    def __init__(self, partial):
        self.partial = partial
        self.func, self.args, self.keywords = partial.func, partial.args, partial.keywords

    def __call__(self, *args, **kwargs):
        return self.partial(*args, **kwargs)

    def __eq__(self, other):
        if isinstance(other, _BoundPartial):
            return self.partial == other.partial
        return self.partial == other

    def __hash__(self):
        return hash(self.partial)

    def __repr__(self):
        return f"_BoundPartial({self.partial!r})"


class Partial(functools.partial):
    """A functools.partial that is a pytree: its bound arguments are leaves
    and the function is static structure (so it can be passed through jit).
    Unlike functools, Partial(p, ...) of a partial `p` does not merge `p`'s
    arguments in: they stay static, inside the function (as in JAX)."""

    def __new__(cls, func, *args, **kwargs):
        if isinstance(func, functools.partial):
            func = _BoundPartial(func)
        return super().__new__(cls, func, *args, **kwargs)


register_pytree_node(
    Partial,
    lambda p: ((p.args, p.keywords), p.func),
    lambda func, xs: Partial(func, *xs[0], **xs[1]),
)


# ---------------------------------------------------------------------------
# The public view: the functions above, run over _public_kinds (boundary types are leaves).
# Each is the same code object with `_kinds` bound to the public table, so the two views
# cannot drift apart and the transformations' flattening (the functions above) pays nothing.

_PUBLIC_NAMES = (
    "_kind_of", "_flatten", "_flatten_is_leaf", "_flatten_with_path", "tree_flatten",
    "tree_flatten_with_path", "tree_leaves", "tree_leaves_with_path", "tree_structure", "tree_map",
    "tree_map_with_path", "tree_broadcast", "tree_reduce", "tree_reduce_associative", "tree_all",
    "flatten_one_level", "flatten_one_level_with_keys", "is_tree_node", "all_leaves", "tree_transpose",
)


def _public_view():
    names = dict(globals())
    names["_kinds"] = _public_kinds
    for name in _PUBLIC_NAMES:
        fn = globals()[name]
        clone = types.FunctionType(fn.__code__, names, fn.__name__, fn.__defaults__, fn.__closure__)
        clone.__kwdefaults__ = fn.__kwdefaults__
        clone.__doc__, clone.__qualname__, clone.__module__ = fn.__doc__, fn.__qualname__, fn.__module__
        names[name] = clone
    return types.SimpleNamespace(**{n: names[n] for n in _PUBLIC_NAMES if not n.startswith("_")})


public = _public_view()
