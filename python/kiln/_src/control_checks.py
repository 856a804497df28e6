"""Type checks of control flow (cond, switch, while_loop, fori_loop, scan), raising the
TypeErrors JAX raises, with its wording: branch outputs that differ in structure or type, and
loop bodies whose carry output differs from the carry input. A path names each leaf the way
`jax.tree_util.keystr` does (`c[1]`, `p['w']`, `s.field`)."""

import inspect

import numpy as np

from kiln._src import tree_util as tu


def _kind(x):
    k = tu._kinds.get(type(x))
    return tu._classify(type(x)) if k is None else k


def _is_leaf(x):
    return _kind(x) is tu._IS_LEAF


def _children(x):
    """(child keys as keystr pieces, children, metadata) of a pytree node."""
    kind = _kind(x)
    children, aux = kind.flatten(x)
    children = list(children)
    if kind is tu._DICT or kind is tu._ORDERED_DICT:
        keys = [f"[{k!r}]" for k in aux]
    elif kind is tu._DEFAULTDICT:
        keys = [f"[{k!r}]" for k in aux[1]]
    elif isinstance(x, tuple) and hasattr(type(x), "_fields"):
        keys = [f".{f}" for f in type(x)._fields]
    else:
        keys = [f"[{i}]" for i in range(len(children))]
    return keys, children, aux


def _leaf_paths(tree, path=""):
    if _is_leaf(tree):
        return [path]
    keys, children, _ = _children(tree)
    out = []
    for k, c in zip(keys, children):
        out.extend(_leaf_paths(c, path + k))
    return out


def _structure_errors(path, t1, t2):
    """(path, thing1, thing2, explanation) for each structural difference, as JAX finds them."""
    if _is_leaf(t1) and _is_leaf(t2):
        return
    if type(t1) is not type(t2):
        show = lambda t: "pytree leaf" if _is_leaf(t) else str(type(t))  # noqa: E731
        yield path, show(t1), show(t2), "their Python types differ"
        return
    if isinstance(t1, (list, tuple)) and len(t1) != len(t2):
        yield (path, f"{type(t1).__name__} of length {len(t1)}", f"{type(t2).__name__} of length {len(t2)}",
               "the lengths do not match")
        return
    k1, c1, a1 = _children(t1)
    k2, c2, a2 = _children(t2)
    if len(c1) != len(c2):
        diff = " ".join(sorted(k[1:-1] for k in set(k1).symmetric_difference(k2)))
        n = lambda c: f"{len(c)} child{'ren' if len(c) > 1 else ''}"  # noqa: E731
        yield (path, f"{type(t1)} with {n(c1)}", f"{type(t2)} with {n(c2)}",
               "the numbers of children do not match" +
               (f", with the symmetric difference of key sets: {{{diff}}}" if diff else ""))
        return
    if a1 != a2:
        yield (path, f"{type(t1)} with pytree metadata {a1}", f"{type(t2)} with pytree metadata {a2}",
               "the pytree node metadata does not match")
        return
    for k, x1, x2 in zip(k1, c1, c2):
        yield from _structure_errors(path + k, x1, x2)


def _type_of(x):
    """(shape, dtype, weak) of a leaf."""
    if hasattr(x, "shape") and hasattr(x, "dtype"):
        return tuple(x.shape), np.dtype(x.dtype), bool(getattr(x, "weak_type", False))
    from kiln._src import core
    a = core.asarray(x)
    return tuple(a.shape), np.dtype(a.dtype), bool(getattr(a, "weak_type", False))


def _short(t):
    return f"{t[1].name}[{','.join(str(d) for d in t[0])}]"


def _mismatch(t1, t2):
    what = []
    if t1[1] != t2[1]:
        what.append("the dtypes do not match")
    if t1[0] != t2[0]:
        what.append("the shapes do not match")
    return ", so " + (what[0] if len(what) == 1 else ", ".join(what[:-1]) + ", and " + what[-1])


def _bullets(diffs, capital=True, gap=True):
    """JAX's text for a list of differences: one sentence, or bullets (with an empty line between
    them where JAX's message has one: `gap`)."""
    if len(diffs) == 1:
        return (diffs[0][0].upper() + diffs[0][1:] if capital else diffs[0]) + ".\n"
    return ("\n" if gap else "").join(f"  * {d};\n" for d in diffs[:-1]) + f"  * {diffs[-1]}.\n"


def source_info(fun):
    """`name at file:line`, as JAX's messages name a function."""
    name = getattr(fun, "__name__", type(fun).__name__)
    code = getattr(fun, "__code__", None)
    if code is None:
        return name
    return f"{name} at {code.co_filename}:{code.co_firstlineno}"


def check_branches(api, name1, fun1, out1, name2, fun2, out2):
    """cond/switch: two branches' outputs must have one structure and equal types (weak types
    aside)."""
    t1 = [_type_of(x) for x in tu.tree_leaves(out1)]
    t2 = [_type_of(x) for x in tu.tree_leaves(out2)]
    same_tree = tu.tree_structure(out1) == tu.tree_structure(out2)
    if same_tree and all(a[:2] == b[:2] for a, b in zip(t1, t2)):
        return
    heads = f"{name1} is {source_info(fun1)}\n{name2} is {source_info(fun2)}\n\n"
    if not same_tree:
        diffs = [f"{name1} output{' at path ' + p if p else ''} is a {a} but {name2} output"
                 f"{' at path ' + p if p else ''} is a {b}, so {why}"
                 for p, a, b, why in _structure_errors("", out1, out2)]
        if diffs:
            raise TypeError(f"{api} branch outputs must have the same pytree structure, but they differ:\n\n"
                            f"{heads}{_bullets(diffs, capital=False)}\nRevise {name1} and/or {name2} so that they have the same pytree "
                            "structure.")
    paths = _leaf_paths(out1)
    diffs = [f"the output of {name1}{' at path ' + p if p else ''} has type {_short(a)} but the corresponding "
             f"output of {name2} has type {_short(b)}{_mismatch(a, b)}"
             for p, a, b in zip(paths, t1, t2) if a[:2] != b[:2]]
    if diffs:
        raise TypeError(f"{api} branches must have equal output types but they differ.\n\n{heads}"
                        f"{_bullets(diffs, gap=False)}\nRevise {name1} and/or {name2} so that all output types match.")


def carry_name(body_fun, default=None):
    try:
        params = list(inspect.signature(body_fun).parameters)
    except (TypeError, ValueError):
        return default
    return params[0] if params else default


def snapshot(tree):
    """A structural copy of tree (fresh containers, the same leaves): a loop body may mutate the
    containers of the carry it is given (flax nnx pops and pushes its deques), and the carry's
    structure is checked as it was when the body was called, as JAX flattens it first."""
    leaves, td = tu.tree_flatten(tree)
    return tu.tree_unflatten(td, leaves)


def check_carry(name, carry, init, out):
    """A loop body's carry output must have the carry input's structure and types. `carry` names
    the body's carry parameter (None: unnamed). A weak-typed input of another dtype but the same
    shape is fine (the loop promotes it, as JAX does); returns whether any input needs that."""
    component = ((lambda p: f"the input carry component {carry}{p}" if p else f"the input carry {carry}")
                 if carry else (lambda p: f"the input carry at path {p}" if p else "the input carry"))
    if tu.tree_structure(init) != tu.tree_structure(out):
        diffs = [f"{component(p)} is a {a} but the corresponding component of the carry output is a {b}, so {why}"
                 for p, a, b, why in _structure_errors("", init, out)]
        if diffs:
            raise TypeError(f"{name} function carry input and carry output must have the same pytree structure, "
                            f"but they differ:\n\n{_bullets(diffs)}\nRevise the function so that the carry output has the "
                            "same pytree structure as the carry input.")
    paths = _leaf_paths(init)
    t_in = [_type_of(x) for x in tu.tree_leaves(init)]
    t_out = [_type_of(x) for x in tu.tree_leaves(out)]
    promote = False
    diffs = []
    for p, a, b in zip(paths, t_in, t_out):
        if a[:2] == b[:2]:
            continue
        if a[2] and a[0] == b[0]:
            promote = True
            continue
        diffs.append(f"{component(p)} has type {_short(a)} but the corresponding output carry component has type "
                     f"{_short(b)}{_mismatch(a, b)}")
    if diffs:
        raise TypeError(f"{name} function carry input and carry output must have equal types, but they differ:\n\n"
                        f"{_bullets(diffs)}\nRevise the function so that all output types match the corresponding input "
                        "types.")
    return promote


def promote_weak(init, out):
    """init with each weak-typed leaf converted to the dtype of the matching leaf of out."""
    from kiln import lax
    from kiln._src import core
    leaves, tree = tu.tree_flatten(init)
    res = []
    for x, y in zip(leaves, tu.tree_leaves(out)):
        a, b = _type_of(x), _type_of(y)
        if a[2] and a[1] != b[1]:
            x = lax.convert_element_type(core.asarray(x) if not hasattr(x, "dtype") else x, b[1])
        res.append(x)
    return tu.tree_unflatten(tree, res)
