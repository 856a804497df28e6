"""kiln.tree_util: flatten/unflatten round trips, JAX's ordering and printing
rules, structure equality/hashing (jit cache keys), tree_map with prefixes
and its mismatch errors, custom node registration."""

import collections
import timeit

import numpy as np
import pytest

from kiln import tree_util as tu

Point = collections.namedtuple("Point", "x y")


@tu.register_pytree_node_class
class Box:
    """A registered class: `value` is a child, `label` is static metadata."""

    def __init__(self, value, label):
        self.value = value
        self.label = label

    def tree_flatten(self):
        return (self.value,), self.label

    @classmethod
    def tree_unflatten(cls, label, children):
        return cls(children[0], label)

    def __eq__(self, other):
        return type(other) is Box and self.value == other.value and self.label == other.label


class Pair:
    def __init__(self, a, b):
        self.a, self.b = a, b


tu.register_pytree_node(Pair, lambda p: ([p.a, p.b], None), lambda aux, ch: Pair(*ch))


# (tree, leaves in order, repr of structure) as JAX gives them.
CASES = [
    (1, [1], "PyTreeDef(*)"),
    (None, [], "PyTreeDef(None)"),
    ((), [], "PyTreeDef(())"),
    ([], [], "PyTreeDef([])"),
    ({}, [], "PyTreeDef({})"),
    ((7,), [7], "PyTreeDef((*,))"),
    ((1, 2, 3), [1, 2, 3], "PyTreeDef((*, *, *))"),
    ([1, (2, None), {"b": 3, "a": [4, 5]}], [1, 2, 4, 5, 3],
     "PyTreeDef([*, (*, None), {'a': [*, *], 'b': *}])"),
    (Point(1, [2, 3]), [1, 2, 3], "PyTreeDef(CustomNode(namedtuple[Point], [*, [*, *]]))"),
    (collections.OrderedDict(b=1, a=2), [1, 2],
     "PyTreeDef(CustomNode(OrderedDict[('b', 'a')], [*, *]))"),
    ({"a": None, "b": Point(None, 1)}, [1],
     "PyTreeDef({'a': None, 'b': CustomNode(namedtuple[Point], [None, *])})"),
    (Box([1, 2], "lbl"), [1, 2], "PyTreeDef(CustomNode(Box['lbl'], [[*, *]]))"),
]


@pytest.mark.parametrize("tree,leaves,text", CASES, ids=[c[2] for c in CASES])
def test_flatten_unflatten_round_trip(tree, leaves, text):
    got_leaves, treedef = tu.tree_flatten(tree)
    assert got_leaves == leaves
    assert repr(treedef) == text
    assert treedef.num_leaves == len(leaves)
    rebuilt = tu.tree_unflatten(treedef, got_leaves)
    assert rebuilt == tree and type(rebuilt) is type(tree)
    assert tu.tree_leaves(tree) == leaves
    assert tu.tree_structure(tree) == treedef


def test_dict_children_are_sorted_and_rebuilt_sorted():
    leaves, treedef = tu.tree_flatten({"b": 1, "a": 2, "c": 0})
    assert leaves == [2, 1, 0]
    rebuilt = treedef.unflatten(["A", "B", "C"])
    assert list(rebuilt.items()) == [("a", "A"), ("b", "B"), ("c", "C")]
    # OrderedDict keeps insertion order, and it is part of the structure.
    od = collections.OrderedDict([("b", 1), ("a", 2)])
    assert tu.tree_leaves(od) == [1, 2]
    assert tu.tree_structure(od) != tu.tree_structure(collections.OrderedDict([("a", 2), ("b", 1)]))
    with pytest.raises(ValueError, match="sortable"):
        tu.tree_flatten({1: "x", "a": "y"})


def test_defaultdict_round_trip():
    d = collections.defaultdict(list, {"z": 1, "y": (2,)})
    leaves, treedef = tu.tree_flatten(d)
    assert leaves == [2, 1]
    out = treedef.unflatten([20, 10])
    assert type(out) is collections.defaultdict and out.default_factory is list
    assert dict(out) == {"y": (20,), "z": 10}


def test_subclasses_of_containers_are_leaves():
    class MyDict(dict):
        pass

    class MyTuple(tuple):
        pass

    assert tu.tree_leaves(MyDict(a=1)) == [MyDict(a=1)]
    assert tu.tree_leaves(MyTuple((1, 2))) == [MyTuple((1, 2))]


def test_registered_node_and_static_aux():
    tree = [Pair(1, Box(2, "k")), 3]
    leaves, treedef = tu.tree_flatten(tree)
    assert leaves == [1, 2, 3]
    out = treedef.unflatten([10, 20, 30])
    assert isinstance(out[0], Pair) and out[0].a == 10 and out[0].b == Box(20, "k")
    # Static metadata is part of the structure.
    assert tu.tree_structure(Box(1, "a")) != tu.tree_structure(Box(1, "b"))
    with pytest.raises(ValueError, match="already registered"):
        tu.register_pytree_node(Pair, lambda p: ([], None), lambda a, c: None)


def test_is_leaf_stops_descent():
    tree = {"a": (1, 2), "b": [3, (4, 5)]}
    leaves, treedef = tu.tree_flatten(tree, is_leaf=lambda x: isinstance(x, tuple))
    assert leaves == [(1, 2), 3, (4, 5)]
    assert treedef.num_leaves == 3
    assert tu.tree_flatten(None, is_leaf=lambda x: x is None)[0] == [None]


def test_treedef_equality_and_hash_are_exact():
    a = tu.tree_structure(((1, 2), {"x": 3}))
    b = tu.tree_structure((("p", "q"), {"x": np.zeros(3)}))
    assert a == b and hash(a) == hash(b)
    different = [
        tu.tree_structure(([1, 2], {"x": 3})),       # list vs tuple
        tu.tree_structure(((1, 2), {"y": 3})),       # dict key
        tu.tree_structure(((1, 2, 3), {"x": 3})),    # arity
        tu.tree_structure(((1, None), {"x": 3})),    # None is not a leaf
        tu.tree_structure(((1, (2,)), {"x": 3})),    # nesting
        tu.tree_structure(Point((1, 2), {"x": 3})),  # namedtuple vs tuple
    ]
    for d in different:
        assert a != d, d
    assert len({a, b, *different}) == 1 + len(different)
    assert a != "PyTreeDef(((*, *), {'x': *}))"


def test_unflatten_checks_leaf_count():
    treedef = tu.tree_structure([1, 2])
    with pytest.raises(ValueError, match="Too few leaves"):
        treedef.unflatten([1])
    with pytest.raises(ValueError, match="Too many leaves"):
        treedef.unflatten([1, 2, 3])
    assert tu.tree_structure(5).unflatten(["leaf"]) == "leaf"


def test_treedef_children_and_nodes():
    treedef = tu.tree_structure([1, (2, 3), None])
    assert treedef.num_nodes == 6  # list, leaf, tuple, leaf, leaf, None
    kids = treedef.children()
    assert [repr(k) for k in kids] == ["PyTreeDef(*)", "PyTreeDef((*, *))", "PyTreeDef(None)"]
    assert [k.num_leaves for k in kids] == [1, 2, 0]
    assert tu.treedef_is_leaf(kids[0]) and not tu.treedef_is_leaf(kids[1])
    both = tu.treedef_tuple([kids[0], kids[1]])
    assert both == tu.tree_structure((0, (0, 0)))
    assert treedef.node_data() == (list, None)


def test_tree_map():
    tree = {"a": [1, 2], "b": (3, None)}
    assert tu.tree_map(lambda x: x * 10, tree) == {"a": [10, 20], "b": (30, None)}
    other = {"a": [5, 6], "b": (7, None)}
    assert tu.tree_map(lambda x, y: x + y, tree, other) == {"a": [6, 8], "b": (10, None)}
    # The first tree may be a prefix: whole subtrees are passed.
    assert tu.tree_map(lambda x, y: (x, y), (1, 2), ([3, 4], {"q": 5})) == ((1, [3, 4]), (2, {"q": 5}))
    # A leaf of the first tree may face a None in the others.
    assert tu.tree_map(lambda x, y: y, [1, 2], [None, 3]) == [None, 3]
    x = np.arange(3.0)
    out = tu.tree_map(lambda v: v + 1, (x, [x]))
    np.testing.assert_array_equal(out[1][0], x + 1)
    # is_leaf applies to the first tree.
    assert tu.tree_map(len, [(1, 2), (3,)], is_leaf=lambda t: isinstance(t, tuple)) == [2, 1]


@pytest.mark.parametrize("first,second,detail", [
    ((1, 2), [1, 2], "expected a tuple, got a list"),
    ((1, 2), (1, 2, 3), "2 children, got 3"),
    ({"a": 1, "b": 2}, {"a": 1, "c": 2}, "metadata differs"),
    ([1, None], [2, 3], r"at \[1\]: expected a NoneType, got a leaf"),
    ({"a": [1, (2, 3)]}, {"a": [1, 5]}, r"at \['a'\]\[1\]"),
])
def test_tree_map_mismatch_names_both_structures(first, second, detail):
    with pytest.raises(ValueError, match=detail) as info:
        tu.tree_map(lambda *xs: xs[0], first, second)
    message = str(info.value)
    assert repr(tu.tree_structure(first)) in message
    assert repr(tu.tree_structure(second)) in message
    assert "tree_map" in message


def test_tree_reduce_and_all():
    assert tu.tree_reduce(lambda a, b: a + b, [1, (2, 3)]) == 6
    assert tu.tree_reduce(lambda a, b: a + b, {"x": 1}, 100) == 101
    assert tu.tree_reduce(lambda a, b: a + b, [], initializer=7) == 7
    with pytest.raises(TypeError, match="no leaves"):
        tu.tree_reduce(lambda a, b: a + b, [None])
    assert tu.tree_all([1, (True, "s")])
    assert not tu.tree_all([1, (0, "s")])
    assert tu.tree_all([])


def test_tree_transpose():
    outer = tu.tree_structure([0, 0])
    inner = tu.tree_structure((0, 0))
    assert tu.tree_transpose(outer, inner, [(1, 2), (3, 4)]) == ([1, 3], [2, 4])


def test_partial_is_a_pytree():
    def f(a, b, c=0):
        return a + b + c

    p = tu.Partial(f, 1, c=3)
    leaves, treedef = tu.tree_flatten(p)
    assert sorted(leaves) == [1, 3]
    q = treedef.unflatten([x * 10 for x in leaves])
    assert q(2) == 10 + 2 + 30
    assert tu.tree_structure(tu.Partial(f, 5, c=6)) == treedef
    assert tu.tree_structure(tu.Partial(len, 5, c=6)) != treedef


def test_unhashable_aux_is_hashed_by_type_and_compared_by_value():
    # As JAX: a treedef whose aux_data cannot be hashed (a list) still hashes (jit caches on it);
    # two treedefs are equal when their aux_data compare equal.
    class Odd:
        def __init__(self, aux):
            self.aux = aux

    tu.register_pytree_node(Odd, lambda b: ((), b.aux), lambda aux, ch: Odd(aux))
    a, b, c = tu.tree_structure(Odd([1, 2])), tu.tree_structure(Odd([1, 2])), tu.tree_structure(Odd([3]))
    assert hash(a) == hash(b) and a == b and a != c


def test_aux_data_is_compared_but_not_hashed():
    """As JAX: a treedef's hash leaves aux_data out (flax's GraphDef costs microseconds to hash, and
    jit hashes every call's structure); equality still compares it, so jit keys stay exact."""
    hashed = []

    class Costly:
        def __init__(self, aux):
            self.aux = aux

    class Aux:
        def __init__(self, v):
            self.v = v

        def __eq__(self, other):
            return isinstance(other, Aux) and self.v == other.v

        def __hash__(self):
            hashed.append(self.v)
            return hash(self.v)

    tu.register_pytree_node(Costly, lambda b: ((b.aux.v,), b.aux), lambda aux, ch: Costly(aux))
    a, b, c = (tu.tree_structure({"k": Costly(Aux(v))}) for v in (1, 1, 2))
    assert hash(a) == hash(b) and a == b and a != c and hashed == []
    assert len({a, b, c}) == 2
    assert hash(tu.tree_structure({"x": 1})) != hash(tu.tree_structure({"y": 1}))  # dict keys count


def test_jit_with_no_sharding_leaves_is_plain_jit():
    """jit(f, in_shardings/out_shardings=trees holding only None), as flax nnx passes, is plain jit
    (its C fast path), not the sharded wrapper."""
    import kiln
    from kiln._src.api import JitWrapped
    f = kiln.jit(lambda a: a * 2, in_shardings=(None,), out_shardings=(None, ()))
    assert type(f) is JitWrapped
    np.testing.assert_array_equal(np.asarray(f(np.arange(3.0))), np.arange(3.0) * 2)


def test_flatten_is_fast():
    # On jit's dispatch path: a few leaves must flatten in about a microsecond.
    x = np.zeros(3)
    args = (x, x, x)
    n = 20000
    best = min(timeit.repeat(lambda: tu.tree_flatten(args), number=n, repeat=5)) / n
    assert best < 5e-6, f"tree_flatten of 3 leaves took {best * 1e6:.2f} us"


def test_the_c_walk_agrees_with_the_python_walk():
    """tree_flatten/unflatten walk in C (python/ext/pytree.c, for dispatch time); the Python walk
    stays for is_leaf and paths. Both give the same leaves and structure on every kind of node:
    builtins, namedtuples, None, OrderedDict/defaultdict, registered classes (whose flatten may
    return any iterable), nesting; and the same errors."""
    from kiln._src import tree_util as tu_src
    rng = np.random.default_rng()

    class Box2:
        def __init__(self, a, b):
            self.a, self.b = a, b

        def __eq__(self, o):
            return type(o) is Box2 and (self.a, self.b) == (o.a, o.b)
    if Box2 not in tu_src._registered:
        tu_src.register_pytree_node(Box2, lambda x: (iter([x.a, x.b]), "aux"), lambda aux, ch: Box2(*ch))
    P = collections.namedtuple("P", "x y")

    def rand_tree(depth):
        k = int(rng.integers(0, 9 if depth < 4 else 1))
        leaf = lambda: float(rng.standard_normal()) if rng.random() < 0.5 else int(rng.integers(9))  # noqa: E731
        if k == 0:
            return leaf()
        n = int(rng.integers(0, 4))
        kids = [rand_tree(depth + 1) for _ in range(n)]
        return [lambda: tuple(kids), lambda: list(kids), lambda: {f"k{rng.integers(99)}_{i}": c for i, c in enumerate(kids)},
                lambda: None, lambda: P(rand_tree(depth + 1), kids),
                lambda: collections.OrderedDict((f"z{i}", c) for i, c in enumerate(kids)),
                lambda: Box2(rand_tree(depth + 1), kids), lambda: (None, kids, ())][k - 1]()
    for _ in range(200):
        t = rand_tree(0)
        leaves_py, leaves_c = [], []
        node_py = tu_src._flatten(t, leaves_py)
        node_c = tu_src._c_flatten(t, leaves_c)
        assert node_py == node_c and leaves_py == leaves_c
        leaves, tdef = tu.tree_flatten(t)
        new = [x + 1 if not isinstance(x, bool) else x for x in leaves]
        assert tdef.unflatten(new) == tu_src._unflatten(tdef._node, iter(new)) if tdef._node is not None else True
        assert tu.tree_unflatten(tdef, leaves) == t
    with pytest.raises(ValueError, match="mutually sortable"):
        tu.tree_flatten({1: 0, "a": 1})
    deep = 0
    for _ in range(100000):
        deep = [deep]
    with pytest.raises(RecursionError):
        tu.tree_flatten(deep)
    # the public view keeps typed keys (a boundary node) leaves; the transformations' view opens them
    from kiln import random as krandom
    key = krandom.key(int(rng.integers(99)))
    assert tu.tree_leaves({"k": key}) == [key] and tu.tree_leaves([key], is_leaf=lambda x: False) == [key]
    assert not isinstance(tu_src.tree_leaves({"k": key})[0], krandom.PRNGKeyArray)
