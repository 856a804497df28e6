"""kiln.tree_util's key paths and the rest of jax.tree_util's API (key entries,
keystr, *_with_path, the registration forms, treedef methods, broadcast,
transpose, Partial) and the kiln.tree module. Expected values are what JAX
0.10.2 gives for the same calls, written out as literals."""

import collections
import dataclasses
import operator
import pickle

import numpy as np
import pytest

import kiln
import kiln.numpy as jnp
import kiln.tree
from kiln import tree_util as tu
from kiln.tree_util import DictKey, FlattenedIndexKey, GetAttrKey, SequenceKey

P = collections.namedtuple("P", "x y")


class NoKeys:
    """Registered without keys: its children get FlattenedIndexKey paths."""

    def __init__(self, a, b):
        self.a, self.b = a, b


tu.register_pytree_node(NoKeys, lambda n: ((n.a, n.b), None), lambda aux, ch: NoKeys(*ch))


class Pt:
    """Registered with keys, and no separate flatten function."""

    def __init__(self, a, b):
        self.a, self.b = a, b

    def __repr__(self):
        return f"Pt({self.a}, {self.b})"


tu.register_pytree_with_keys(
    Pt, lambda p: (((GetAttrKey("a"), p.a), (GetAttrKey("b"), p.b)), None),
    lambda aux, ch: Pt(*ch))


@tu.register_pytree_with_keys_class
class Named:
    """Class form: the children are named by DictKey, the names are aux_data."""

    flatten_calls = 0

    def __init__(self, items):
        self.items = items

    def tree_flatten(self):
        Named.flatten_calls += 1
        return [v for _, v in self.items], tuple(k for k, _ in self.items)

    def tree_flatten_with_keys(self):
        return [(DictKey(k), v) for k, v in self.items], tuple(k for k, _ in self.items)

    @classmethod
    def tree_unflatten(cls, names, children):
        return cls(list(zip(names, children)))


@tu.register_dataclass
@dataclasses.dataclass
class Params:
    """The bare decorator form: `act` is static through kiln.tree.static."""
    w: object
    b: object
    act: str = kiln.tree.static(default="tanh")


@tu.register_static
class Tag:
    """A static node: no children, the instance is its own aux_data."""

    def __init__(self, v):
        self.v = v

    def __repr__(self):
        return f"Tag({self.v})"

    def __eq__(self, other):
        return type(other) is Tag and other.v == self.v

    def __hash__(self):
        return hash(self.v)


def paths_and_leaves(tree, **kw):
    return [(tu.keystr(path), leaf) for path, leaf in tu.tree_leaves_with_path(tree, **kw)]


# ---------------------------------------------------------------------------
# Key entries and keystr.

def test_key_entries_print_compare_and_hash_as_jax():
    keys = [DictKey("a"), DictKey(1), SequenceKey(2), GetAttrKey("x"), FlattenedIndexKey(3)]
    assert [repr(k) for k in keys] == [
        "DictKey(key='a')", "DictKey(key=1)", "SequenceKey(idx=2)", "GetAttrKey(name='x')",
        "FlattenedIndexKey(key=3)"]
    assert [str(k) for k in keys] == ["['a']", "[1]", "[2]", ".x", "[<flat index 3>]"]
    assert str(DictKey(None)) == "[None]" and repr(DictKey(("a", 1))) == "DictKey(key=('a', 1))"
    # Keyword construction with JAX's field names, and pattern matching on them.
    assert DictKey(key="k") == DictKey("k") and SequenceKey(idx=3).idx == 3
    assert GetAttrKey(name="n").name == "n" and FlattenedIndexKey(key=1).key == 1
    match SequenceKey(4):
        case SequenceKey(idx=i):
            assert i == 4
    # Equal only within one class; equal keys hash equal.
    assert DictKey("a") != GetAttrKey("a") and SequenceKey(0) != FlattenedIndexKey(0)
    assert SequenceKey(0) != 0 and DictKey(1) == DictKey(1.0)
    assert len({DictKey("a"), DictKey("a"), SequenceKey(0)}) == 2
    assert pickle.loads(pickle.dumps(DictKey("a"))) == DictKey("a")
    assert SequenceKey(np.int64(2)) == SequenceKey(2)


def test_key_entries_are_immutable_and_typed():
    with pytest.raises(AttributeError):
        DictKey("a").key = "b"
    with pytest.raises(TypeError):
        DictKey()
    for make, bad in [(SequenceKey, "a"), (GetAttrKey, 1), (FlattenedIndexKey, "a")]:
        with pytest.raises(TypeError):
            make(bad)
    with pytest.raises(TypeError):
        hash(DictKey([1]))


def test_keystr_default_simple_and_separator():
    path = (DictKey("a"), SequenceKey(0), GetAttrKey("f"), FlattenedIndexKey(2))
    assert tu.keystr(path) == "['a'][0].f[<flat index 2>]"
    assert tu.keystr(path, simple=True) == "a0f2"
    assert tu.keystr(path, simple=True, separator=".") == "a.0.f.2"
    assert tu.keystr(path, separator="|") == "['a']|[0]|.f|[<flat index 2>]"
    assert tu.keystr(()) == "" and tu.keystr((), simple=True) == ""
    # Anything else is shown with str().
    assert tu.keystr(("s", 3)) == "s3"
    assert tu.keystr((DictKey(("t", 1)),)) == "[('t', 1)]"
    assert tu.keystr((DictKey(("t", 1)),), simple=True) == "('t', 1)"
    assert tu.keystr([DictKey("a"), SequenceKey(1)]) == "['a'][1]"


# ---------------------------------------------------------------------------
# Paths of the builtin nodes and of registered ones.

def test_paths_of_builtin_nodes():
    tree = [1, (2, None), {"b": 3, "a": [4, 5]}, P(6, 7),
            collections.OrderedDict([("z", 8), ("y", 9)]),
            collections.defaultdict(list, {"q": 10, "p": 11})]
    pairs, treedef = tu.tree_flatten_with_path(tree)
    # dict and defaultdict children in sorted key order, OrderedDict in its own.
    assert [(tu.keystr(p), x) for p, x in pairs] == [
        ("[0]", 1), ("[1][0]", 2), ("[2]['a'][0]", 4), ("[2]['a'][1]", 5), ("[2]['b']", 3),
        ("[3].x", 6), ("[3].y", 7), ("[4]['z']", 8), ("[4]['y']", 9), ("[5]['p']", 11),
        ("[5]['q']", 10)]
    assert [tu.keystr(p, simple=True, separator="/") for p, _ in pairs] == [
        "0", "1/0", "2/a/0", "2/a/1", "2/b", "3/x", "3/y", "4/z", "4/y", "5/p", "5/q"]
    assert pairs[2][0] == (SequenceKey(2), DictKey("a"), SequenceKey(0))
    assert pairs[5][0] == (SequenceKey(3), GetAttrKey("x"))
    assert treedef == tu.tree_structure(tree)
    assert repr(treedef) == (
        "PyTreeDef([*, (*, None), {'a': [*, *], 'b': *}, CustomNode(namedtuple[P], [*, *]), "
        "CustomNode(OrderedDict[('z', 'y')], [*, *]), "
        "CustomNode(defaultdict[(<class 'list'>, ('p', 'q'))], [*, *])])")
    assert tu.tree_leaves_with_path(tree) == pairs
    assert tu.tree_flatten_with_path(5) == ([((), 5)], tu.tree_structure(5))
    assert tu.tree_flatten_with_path(None) == ([], tu.tree_structure(None))
    assert paths_and_leaves({1: "a", 0: "b"}) == [("[0]", "b"), ("[1]", "a")]


def test_paths_of_nodes_registered_without_keys():
    pairs, treedef = tu.tree_flatten_with_path(NoKeys(1, [2, 3]))
    assert pairs == [((FlattenedIndexKey(0),), 1),
                     ((FlattenedIndexKey(1), SequenceKey(0)), 2),
                     ((FlattenedIndexKey(1), SequenceKey(1)), 3)]
    assert repr(treedef) == "PyTreeDef(CustomNode(NoKeys[None], [*, [*, *]]))"
    # Partial is one of kiln's own registered nodes: (args, keywords).
    pairs, treedef = tu.tree_flatten_with_path(tu.Partial(max, 1, 2, key=3))
    assert pairs == [((FlattenedIndexKey(0), SequenceKey(0)), 1),
                     ((FlattenedIndexKey(0), SequenceKey(1)), 2),
                     ((FlattenedIndexKey(1), DictKey("key")), 3)]
    assert repr(treedef) == (
        "PyTreeDef(CustomNode(Partial[<built-in function max>], [(*, *), {'key': *}]))")


def test_paths_of_nodes_registered_with_keys():
    pairs, treedef = tu.tree_flatten_with_path(Pt(1, (2, 3)))
    assert [(tu.keystr(p), x) for p, x in pairs] == [(".a", 1), (".b[0]", 2), (".b[1]", 3)]
    assert repr(treedef) == "PyTreeDef(CustomNode(Pt[None], [*, (*, *)]))"
    assert tu.tree_flatten(Pt(1, 2))[0] == [1, 2]
    assert repr(tu.tree_map(lambda x: x + 1, Pt(1, 2))) == "Pt(2, 3)"
    pairs, treedef = tu.tree_flatten_with_path(Named([("u", 1), ("v", 2)]))
    assert pairs == [((DictKey("u"),), 1), ((DictKey("v"),), 2)]
    assert repr(treedef) == "PyTreeDef(CustomNode(Named[('u', 'v')], [*, *]))"
    # With both methods, plain flattening uses tree_flatten and paths use the keyed one.
    Named.flatten_calls = 0
    tu.tree_leaves(Named([("u", 1)]))
    tu.tree_flatten_with_path(Named([("u", 1)]))
    assert Named.flatten_calls == 1


def test_is_leaf_with_and_without_the_path():
    tree = (1, (2, 3))
    assert tu.tree_flatten_with_path(tree, is_leaf=lambda x: x == (2, 3))[0] == [
        ((SequenceKey(0),), 1), ((SequenceKey(1),), (2, 3))]
    assert tu.tree_flatten_with_path(
        tree, is_leaf=lambda p, x: len(p) == 1, is_leaf_takes_path=True)[0] == [
        ((SequenceKey(0),), 1), ((SequenceKey(1),), (2, 3))]
    seen = []
    tu.tree_flatten_with_path({"a": Pt(1, [2])}, is_leaf_takes_path=True,
                              is_leaf=lambda p, x: seen.append(tu.keystr(p)) or False)
    assert seen == ["", "['a']", "['a'].a", "['a'].b", "['a'].b[0]"]
    assert tu.tree_map_with_path(lambda p, x: tu.keystr(p), {"a": [1, 2]}, is_leaf_takes_path=True,
                                 is_leaf=lambda p, x: isinstance(x, list)) == {"a": "['a']"}


def test_map_with_path():
    assert tu.tree_map_with_path(lambda p, x: (tu.keystr(p), x), (1, {"a": 2})) == (
        ("[0]", 1), {"a": ("[1]['a']", 2)})
    assert tu.tree_map_with_path(lambda p, x, y: (len(p), x + y),
                                 (1, {"a": 2}), (10, {"a": 20})) == ((1, 11), {"a": (2, 22)})
    assert kiln.tree.map_with_path(lambda path, x: x + path[0].idx, [1, 2, 3]) == [1, 3, 5]
    with pytest.raises(ValueError, match="tree_map_with_path"):
        tu.tree_map_with_path(lambda p, x, y: x, (1, 2), [1, 2])


# ---------------------------------------------------------------------------
# register_dataclass and register_static.

def test_register_dataclass_decorator_and_static_fields():
    p = Params(1, [2, 3])
    pairs, treedef = tu.tree_flatten_with_path(p)
    assert pairs == [((GetAttrKey("w"),), 1), ((GetAttrKey("b"), SequenceKey(0)), 2),
                     ((GetAttrKey("b"), SequenceKey(1)), 3)]
    assert repr(treedef) == "PyTreeDef(CustomNode(Params[('tanh',)], [*, [*, *]]))"
    assert treedef.node_data() == (Params, ("tanh",))
    assert treedef.unflatten([5, 6, 7]) == Params(5, [6, 7], "tanh")
    assert tu.tree_structure(Params(1, 2)) == tu.tree_structure(Params(3, 4))
    assert tu.tree_structure(Params(1, 2)) != tu.tree_structure(Params(1, 2, "id"))

    @tu.register_dataclass
    @dataclasses.dataclass
    class Op:  # static through dataclasses.field metadata
        x: object
        op: str = dataclasses.field(default="add", metadata=dict(static=True))

    assert repr(tu.tree_structure(Op(1))) == "PyTreeDef(CustomNode(Op[('add',)], [*]))"


def test_register_dataclass_with_explicit_fields():
    class ND:
        def __init__(self, a, b, m):
            self.a, self.b, self.m = a, b, m

    assert tu.register_dataclass(ND, data_fields=["b", "a"], meta_fields=["m"]) is ND
    pairs, treedef = tu.tree_flatten_with_path(ND(1, 2, "q"))
    assert pairs == [((GetAttrKey("b"),), 2), ((GetAttrKey("a"),), 1)]
    assert repr(treedef) == "PyTreeDef(CustomNode(ND[('q',)], [*, *]))"
    out = treedef.unflatten([7, 8])
    assert (out.a, out.b, out.m) == (8, 7, "q")

    @dataclasses.dataclass
    class F:
        x: int
        y: int

    tu.register_dataclass(F, data_fields=["x"], meta_fields=[], drop_fields=["y"])
    assert repr(tu.tree_structure(F(1, 2))) == "PyTreeDef(CustomNode(F[()], [*]))"
    assert tu.tree_leaves(F(1, 2)) == [1]


def test_register_dataclass_errors():
    with pytest.raises(TypeError, match="must both be specified"):
        tu.register_dataclass(type("Z", (), {}), data_fields=["x"])
    with pytest.raises(TypeError, match="required when nodetype is not a dataclass"):
        tu.register_dataclass(type("Z", (), {}))

    @dataclasses.dataclass
    class E:
        x: int
        y: int

    with pytest.raises(ValueError, match=r"Missing fields: \{'y'\}"):
        tu.register_dataclass(E, data_fields=["x"], meta_fields=[])
    with pytest.raises(ValueError, match=r"Unexpected fields: \{'w'\}"):
        tu.register_dataclass(E, data_fields=["x", "y", "w"], meta_fields=[])
    with pytest.raises(ValueError, match=r"must not overlap. Overlapping fields: \{'y'\}"):
        tu.register_dataclass(E, data_fields=["x", "y"], meta_fields=["y"])


def test_register_static():
    pairs, treedef = tu.tree_flatten_with_path([Tag(1), 2])
    assert pairs == [((SequenceKey(1),), 2)]
    assert repr(treedef) == "PyTreeDef([CustomNode(Tag[Tag(1)], []), *])"
    assert treedef.unflatten([5]) == [Tag(1), 5]
    assert tu.tree_structure(Tag(1)) != tu.tree_structure(Tag(2))
    assert tu.tree_structure(Tag(1)).num_nodes == 1
    assert tu.treedef_is_leaf(tu.tree_structure(Tag(1)))
    assert not tu.all_leaves([Tag(1)])


# ---------------------------------------------------------------------------
# One level, treedef methods, all_leaves.

def test_flatten_one_level():
    children, aux = tu.flatten_one_level({"b": 1, "a": [2]})
    assert list(children) == [[2], 1] and aux == ("a", "b")
    assert tu.flatten_one_level((1, 2)) == ((1, 2), None)
    assert tu.flatten_one_level(None) == ((), None)
    children, aux = tu.flatten_one_level(collections.OrderedDict(b=1, a=2))
    assert list(children) == [1, 2] and aux == ("b", "a")
    children, aux = tu.flatten_one_level(collections.defaultdict(int, b=1, a=2))
    assert list(children) == [2, 1] and aux == (int, ("a", "b"))
    children, aux = tu.flatten_one_level(Params(1, [2, 3]))
    assert list(children) == [1, [2, 3]] and aux == ("tanh",)
    for leaf, name in [(3, "<class 'int'>"), (np.zeros(2), "<class 'numpy.ndarray'>")]:
        with pytest.raises(ValueError, match=f"can't tree-flatten type: {name}"):
            tu.flatten_one_level(leaf)
    keyed, aux = tu.flatten_one_level_with_keys({"b": 1, "a": [2]})
    assert list(keyed) == [(DictKey("a"), [2]), (DictKey("b"), 1)] and aux == ("a", "b")
    assert list(tu.flatten_one_level_with_keys([5])[0]) == [(SequenceKey(0), 5)]
    # (JAX 0.10.2 names both namedtuple children .x here, a bug in its C++ walk;
    # its tree_flatten_with_path says .x and .y, as kiln does everywhere.)
    assert list(tu.flatten_one_level_with_keys(P(1, 2))[0]) == [
        (GetAttrKey("x"), 1), (GetAttrKey("y"), 2)]
    with pytest.raises(ValueError, match="can't tree-flatten"):
        tu.flatten_one_level_with_keys(3)
    assert [tu.is_tree_node(t) for t in (list, P, int, type(None), collections.OrderedDict)] == [
        True, True, False, True, True]


def test_treedef_methods():
    treedef = tu.tree_structure([1, (2, 3), None, {"a": 4}])
    assert (treedef.num_leaves, treedef.num_nodes) == (4, 8)
    assert [repr(c) for c in treedef.children()] == [
        "PyTreeDef(*)", "PyTreeDef((*, *))", "PyTreeDef(None)", "PyTreeDef({'a': *})"]
    assert tu.treedef_children(treedef) == treedef.children()
    assert tu.tree_structure(1).children() == [] and tu.tree_structure(None).children() == []
    assert (tu.tree_structure(None).num_nodes, tu.tree_structure(None).num_leaves) == (1, 0)
    assert treedef.unflatten(iter([10, 20, 30, 40])) == [10, (20, 30), None, {"a": 40}]
    assert treedef.flatten_up_to([[1], ((2,), 3), None, {"a": {"x": 4}}]) == [
        [1], (2,), 3, {"x": 4}]
    assert treedef.node_data() == (list, None)
    assert tu.tree_structure({"a": 1}).node_data() == (dict, ["a"])
    assert tu.tree_structure(P(1, 2)).node_data() == (P, None)
    assert tu.tree_structure(1).node_data() is None
    assert repr(treedef.compose(tu.tree_structure((1, 2)))) == (
        "PyTreeDef([(*, *), ((*, *), (*, *)), None, {'a': (*, *)}])")
    assert tu.tree_structure((1, 2)).compose(treedef).num_leaves == 8
    # treedef_is_leaf means "a single node": a leaf, None, or an empty container.
    assert [tu.treedef_is_leaf(tu.tree_structure(t)) for t in (1, None, (), {}, [1])] == [
        True, True, True, True, False]
    assert not tu.treedef_is_leaf(treedef)
    same = tu.tree_structure([5, (6, 7), None, {"a": 8}])
    assert treedef == same and hash(treedef) == hash(same)
    assert treedef != tu.tree_structure([5, (6, 7), None, {"b": 8}]) and treedef != 3
    assert str(treedef) == repr(treedef) == "PyTreeDef([*, (*, *), None, {'a': *}])"


def test_flatten_up_to_names_the_key_path_of_a_mismatch():
    treedef = tu.tree_structure({"p": Params(1, (2, 3))})
    with pytest.raises(ValueError, match=r"at \['p'\]\.b: expected a tuple with 2 children"):
        treedef.flatten_up_to({"p": Params(1, (2, 3, 4))})
    with pytest.raises(ValueError, match=r"at \[2\]: expected a NoneType, got a leaf"):
        tu.tree_structure([1, 2, None]).flatten_up_to([1, 2, 5])


def test_all_leaves():
    assert tu.all_leaves([1, 2, np.zeros(3)])
    assert not tu.all_leaves([1, (2,)])
    assert not tu.all_leaves([1, None])  # None is an empty node, not a leaf
    assert tu.all_leaves([])
    assert tu.all_leaves(iter([1, 2]))
    assert tu.all_leaves([1, (2,)], is_leaf=lambda x: isinstance(x, tuple))
    assert not tu.all_leaves([1, [2]], is_leaf=lambda x: isinstance(x, tuple))


# ---------------------------------------------------------------------------
# broadcast, transpose, reductions, Partial.

def test_tree_broadcast():
    assert tu.tree_broadcast((1, 2, 3), (0, {"a": 0, "b": 0}, (0, 0))) == (1, {"a": 2, "b": 2}, (3, 3))
    assert tu.tree_broadcast(1, [0, (0, None)]) == [1, (1, None)]
    assert tu.tree_broadcast([None, 2], [None, {"x": 1}]) == [None, {"x": 2}]
    # is_leaf applies to the prefix.
    assert tu.tree_broadcast((1, [2, 3]), (0, [(0, 0), 0]), is_leaf=lambda x: isinstance(x, list)) == (
        1, [([2, 3], [2, 3]), [2, 3]])
    for full in ([0, 0], (0, 0, 0)):
        with pytest.raises(ValueError, match="tree_broadcast"):
            tu.tree_broadcast((1, 2), full)
    assert kiln.tree.broadcast is tu.tree_broadcast


def test_tree_transpose():
    outer, inner = tu.tree_structure([0, 0]), tu.tree_structure((0, 0))
    assert tu.tree_transpose(outer, inner, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])
    assert tu.tree_transpose(outer, None, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])
    assert tu.tree_transpose(tu.tree_structure({"a": 0, "b": 0}), tu.tree_structure([0, 0, 0]),
                             {"a": [1, 2, 3], "b": [4, 5, 6]}) == [
        {"a": 1, "b": 4}, {"a": 2, "b": 5}, {"a": 3, "b": 6}]
    assert tu.tree_transpose(outer, tu.tree_structure(()), [(), ()]) == ()
    with pytest.raises(TypeError) as info:
        tu.tree_transpose(outer, tu.tree_structure((0, 0, 0)), [(1, 2), (3, 4)])
    assert str(info.value) == (
        "Mismatch\nPyTreeDef([(*, *), (*, *)])\n != \nPyTreeDef([(*, *, *), (*, *, *)])")


def test_reductions():
    assert tu.tree_reduce_associative(operator.add, [1, (2, 3), {"a": 4}]) == 10
    assert tu.tree_reduce_associative(operator.add, [], identity=0) == 0
    # Balanced: halves first, so the grouping is JAX's.
    assert tu.tree_reduce_associative(lambda a, b: f"({a}+{b})", [1, 2, 3, 4, 5]) == "((1+2)+(3+(4+5)))"
    with pytest.raises(TypeError, match="Must specify identity"):
        tu.tree_reduce_associative(operator.add, [])
    assert kiln.tree.reduce(operator.add, [1, 2, 3]) == 6
    assert kiln.tree.reduce(operator.add, [1, 2, 3], 10) == 16
    assert kiln.tree.reduce_associative(operator.add, [1, 2, 3]) == 6
    assert kiln.tree.all([1, 0]) is False and kiln.tree.all([]) is True


def test_partial_of_a_partial_keeps_the_inner_arguments_static():
    def f(a, b, c=0):
        return (a, b, c)

    p = tu.Partial(tu.Partial(f, 1), 2)
    assert tu.tree_leaves(p) == [2]  # functools would merge to Partial(f, 1, 2)
    assert p(3) == (1, 2, 3) and p.args == (2,)
    assert p.func.func is f and p.func.args == (1,)
    treedef = tu.tree_structure(p)
    assert treedef.unflatten([5])(6) == (1, 5, 6)
    pairs, treedef = tu.tree_flatten_with_path(tu.Partial(f))
    assert pairs == [] and treedef.num_nodes == 3


def test_tree_module_names():
    names = ["all", "broadcast", "flatten", "flatten_with_path", "leaves", "leaves_with_path",
             "map", "map_with_path", "reduce", "reduce_associative", "static", "structure",
             "transpose", "unflatten"]
    assert sorted(kiln.tree.__all__) == names
    assert kiln.tree.leaves([1, None, 2]) == [1, 2]
    leaves, treedef = kiln.tree.flatten((1, 2))
    assert leaves == [1, 2] and repr(treedef) == "PyTreeDef((*, *))"
    assert repr(kiln.tree.structure({"a": 1})) == "PyTreeDef({'a': *})"
    assert kiln.tree.unflatten(kiln.tree.structure((0, 0)), [5, 6]) == (5, 6)
    assert kiln.tree.leaves_with_path([7]) == [((SequenceKey(0),), 7)]
    assert kiln.tree.flatten_with_path is tu.tree_flatten_with_path
    assert kiln.tree.map(lambda x: -x, (1, [2])) == (-1, [-2])
    assert kiln.tree.transpose is tu.tree_transpose


# ---------------------------------------------------------------------------
# Registered classes through the transformations.

def _loss(p, x):
    y = p.w * x + p.b
    y = jnp.tanh(y) if p.act == "tanh" else y
    return jnp.sum(y ** 2)


def test_dataclass_through_jit_grad_and_vmap():
    p = Params(jnp.array([0.5, -1.0]), jnp.array(0.25))
    x = jnp.array([1.0, 2.0])
    np.testing.assert_allclose(kiln.jit(_loss)(p, x), 1.2896022, rtol=1e-6)
    g = kiln.jit(kiln.grad(_loss))(p, x)
    assert type(g) is Params and g.act == "tanh"
    np.testing.assert_allclose(g.w, [0.7578417, -0.42855957], rtol=1e-5)
    np.testing.assert_allclose(g.b, 0.54356194, rtol=1e-5)
    # The static field selects the other branch, in a separate trace.
    g = kiln.grad(_loss)(Params(p.w, p.b, "id"), x)
    assert g.act == "id"
    np.testing.assert_allclose(g.w, [1.5, -7.0])
    np.testing.assert_allclose(g.b, -2.0)
    batched = Params(jnp.array([[1., 2.], [3., 4.]]), jnp.array([1., 2.]))
    np.testing.assert_allclose(kiln.vmap(lambda p: p.w * 2 + p.b)(batched), [[3., 5.], [8., 10.]])
    out = kiln.jit(lambda p: Params(p.w + 1, p.b, p.act))(p)
    assert type(out) is Params and out.act == "tanh"
    np.testing.assert_allclose(out.w, [1.5, 0.0])


def test_static_fields_and_static_nodes_key_jits_cache():
    traces = []

    @kiln.jit
    def f(p, tag):
        traces.append((p.act, tag.v))
        return p.w * 2

    w = jnp.array([1.0, 2.0])
    for act, v in [("tanh", 1), ("tanh", 1), ("id", 1), ("id", 2), ("tanh", 1)]:
        np.testing.assert_allclose(f(Params(w, 0.0, act), Tag(v)), [2.0, 4.0])
    assert traces == [("tanh", 1), ("id", 1), ("id", 2)]


def test_keyed_nodes_and_partial_through_jit_and_grad():
    def f(pt, fn):
        return fn(pt.a * pt.b[0] + pt.b[1])

    args = (Pt(jnp.array(2.0), (jnp.array(3.0), jnp.array(1.0))), tu.Partial(jnp.multiply, jnp.array(4.0)))
    np.testing.assert_allclose(kiln.jit(f)(*args), 28.0)
    g = kiln.grad(f)(*args)
    assert type(g) is Pt
    np.testing.assert_allclose([g.a, g.b[0], g.b[1]], [12.0, 8.0, 4.0])
    grads = kiln.tree.map_with_path(lambda path, v: (tu.keystr(path), float(v)), g)
    assert grads.a == (".a", 12.0) and grads.b == ((".b[0]", 8.0), (".b[1]", 4.0))
