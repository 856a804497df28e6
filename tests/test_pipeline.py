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
    assert passes == ["traced", "inline", "simplify", "cse", "dce"]
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
    assert passes == ["traced", "inline", "simplify", "dce"]
    assert (tmp_path / names[-1]).read_text().count("cos") == 2


def test_compiling_leaves_the_traced_program_unchanged():
    x = np.ones(4, np.float32)
    builder = kiln.make_jaxpr(lambda v: jnp.exp(v) * 1.0 + 0.0)(x)._traced.builder
    before = builder.counts()
    exe = builder.compile()
    assert builder.counts() == before
    (buf,) = exe(kiln.numpy.asarray(x)._buf)
    assert buf is not None
