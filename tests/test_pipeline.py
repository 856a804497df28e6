"""The named pass pipeline (transforms/pipeline.c): it runs on a copy of the traced program,
KILN_DUMP writes the IR after every pass, and KILN_DISABLE_<PASS> turns an optional pass off."""
import numpy as np

import kiln
import kiln.numpy as jnp


def _passes(dump_dir):
    # files are <sequence>-ir-<step>-<pass>.txt, in the order the passes ran
    names = sorted(p.name for p in dump_dir.iterdir() if "-ir-" in p.name)
    return [n.split("-", 3)[3][:-4] for n in names], names


def test_dump_writes_the_ir_after_every_pass(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    f = kiln.jit(lambda x: jnp.sin(x) * 1.0 + jnp.sin(x))
    x = np.linspace(-1, 1, 7).astype(np.float32)
    np.testing.assert_allclose(np.asarray(f(x)), 2 * np.sin(x), rtol=1e-6)
    passes, names = _passes(tmp_path)
    assert passes == ["traced", "inline", "complex", "legalize", "combine", "simplify", "cse", "dce", "hoist"]
    text = {p: (tmp_path / n).read_text() for p, n in zip(passes, names)}
    assert text["traced"].count("sin") == 2 and "mul" in text["traced"]
    assert "add b e" in text["simplify"]  # sin(x) * 1.0 is sin(x): its uses are redirected
    assert "add b b" in text["cse"]  # the two sin(x) are one value
    assert "mul" not in text["dce"] and text["dce"].count("sin") == 1  # DCE dropped the rest
    assert text["traced"].startswith("{ lambda ; ")
    assert any(p.name.endswith(("kernels.mlir", "kernels-gpu.mlir")) for p in tmp_path.iterdir())  # CPU or GPU


def test_an_optional_pass_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    monkeypatch.setenv("KILN_DISABLE_CSE", "1")
    f = kiln.jit(lambda x: jnp.cos(x) + jnp.cos(x))
    x = np.linspace(-1, 1, 5).astype(np.float32)
    np.testing.assert_allclose(np.asarray(f(x)), 2 * np.cos(x), rtol=1e-6)
    passes, names = _passes(tmp_path)
    assert passes == ["traced", "inline", "complex", "legalize", "combine", "simplify", "dce", "hoist"]
    assert (tmp_path / names[-1]).read_text().count("cos") == 2


def test_compiling_leaves_the_traced_program_unchanged():
    x = np.ones(4, np.float32)
    builder = kiln.make_jaxpr(lambda v: jnp.exp(v) * 1.0 + 0.0)(x)._traced.builder
    before = builder.counts()
    exe = builder.compile()
    assert builder.counts() == before
    (buf,) = exe(kiln.numpy.asarray(x)._buf)
    assert buf is not None


def _dot_lines(text):
    return [l for l in text.splitlines() if "dot_general" in l]


def test_legalize_puts_batch_dims_first(tmp_path, monkeypatch):
    # attention scores: batch dims (b, h) are not leading in either operand; the pass gives
    # each operand a transpose so that the product is a batched GEMM (no host copy on a GPU)
    monkeypatch.setenv("KILN_DUMP", str(tmp_path))
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    k = rng.standard_normal((2, 6, 3, 4)).astype(np.float32)
    f = kiln.jit(lambda q, k: jnp.einsum("bqhd,bkhd->bhqk", q, k))
    np.testing.assert_allclose(np.asarray(f(q, k)), np.einsum("bqhd,bkhd->bhqk", q.astype(np.float64), k),
                               rtol=1e-5, atol=1e-5)
    passes, names = _passes(tmp_path)
    text = {p: (tmp_path / n).read_text() for p, n in zip(passes, names)}
    assert text["inline"].count("transpose") < text["legalize"].count("transpose")
    (dot,) = _dot_lines(text["legalize"])
    assert "lhs_batch=(0, 1)" in dot and "rhs_batch=(0, 1)" in dot, dot
    # each transpose keeps the last axis (d) last: it moves whole rows
    assert "permutation=(0, 2, 1, 3)" in text["legalize"] and "(0, 2, 3, 1)" not in text["legalize"]


def test_legalize_results_match_numpy_for_every_dimension_order():
    rng = np.random.default_rng(1)
    cases = [
        ("bqhd,bkhd->bhqk", (2, 5, 3, 4), (2, 6, 3, 4)),
        ("bhqk,bkhd->bqhd", (2, 3, 5, 6), (2, 6, 3, 4)),
        ("ijk,kjl->jil", (3, 4, 5), (5, 4, 2)),
        ("abc,cab->b", (2, 3, 4), (4, 2, 3)),
        ("iaj,jbi->ab", (3, 2, 4), (4, 5, 3)),
    ]
    for spec, sa, sb in cases:
        a, b = rng.standard_normal(sa), rng.standard_normal(sb)
        want = np.einsum(spec, a, b)
        for dt in (np.float32, np.float64):  # float64 only where x64 is on
            got = kiln.jit(lambda x, y, spec=spec: jnp.einsum(spec, x, y))(a.astype(dt), b.astype(dt))
            tol = 1e-12 if got.dtype == np.float64 else 1e-5
            np.testing.assert_allclose(np.asarray(got), want, rtol=tol, atol=tol, err_msg=spec)
        ia, ib = rng.integers(-5, 5, sa).astype(np.int32), rng.integers(-5, 5, sb).astype(np.int32)
        got = kiln.jit(lambda x, y, spec=spec: jnp.einsum(spec, x, y))(ia, ib)
        np.testing.assert_array_equal(np.asarray(got), np.einsum(spec, ia, ib), err_msg=spec)


def test_legalize_converts_operands_to_the_preferred_type():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 3, 5)).astype(np.float16)
    b = rng.standard_normal((5, 4, 2)).astype(np.float16)
    f = kiln.jit(lambda a, b: kiln.lax.dot_general(a, b, (((2,), (0,)), ((0,), (1,))),
                                                   preferred_element_type=jnp.float32))
    got = f(a, b)
    assert got.dtype == np.float32
    want = np.einsum("bik,kbj->bij", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-3)
