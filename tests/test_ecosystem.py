"""The ecosystem harness (tests/ecosystem/): its own machinery (import hook, sampling, crash and
hang accounting), then CI's fixed subset: a few hundred of optax's and chex's own tests, on JAX
and on kiln through the import hook, in under 10 minutes.

The subset runs with KILN_ECOSYSTEM=1, which CI (.ci/run) sets: it downloads packages from PyPI,
so a plain `make test` skips it. Each library must pass on kiln at least 95% of the tests it
passes on JAX, with no crash and no hang.
"""
import os
import subprocess
import sys
import textwrap
import zlib

import pytest

from tests.ecosystem import harness
from tests.ecosystem.libraries import Library
from tests.ecosystem.plugin.ecoplugin import sampled

needs_ecosystem = pytest.mark.skipif(
    os.environ.get("KILN_ECOSYSTEM") != "1",
    reason="ecosystem subset runs only with KILN_ECOSYSTEM=1, as CI sets it (downloads libraries)")


def test_hook_answers_jax_with_kiln_and_names_what_kiln_lacks():
    code = textwrap.dedent("""
        import sys, kiln
        import jax, jax.numpy as jnp
        from jax import lax
        assert jax is kiln and jnp is sys.modules["kiln.numpy"] and lax is sys.modules["kiln.lax"]
        assert jax.__name__ == "kiln" and jnp.__spec__.name == "kiln.numpy"
        try:
            import jax.no_such_module_xyz
        except ModuleNotFoundError as e:
            assert e.name == "jax.no_such_module_xyz", e.name
            print("MISSING", e)
        try:
            import jaxlib.xla_client
        except ModuleNotFoundError as e:
            print("MISSING", e)
        assert not any(m.__file__ and "site-packages/jax" in m.__file__
                       for m in list(sys.modules.values()) if hasattr(m, "__file__"))
        print(float(jnp.sum(jnp.arange(5.0))))
    """)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([harness.HOOK_DIR, harness.KILN_PYTHON]))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert ("MISSING No module named 'jax.no_such_module_xyz' "
            "(kiln has no 'kiln.no_such_module_xyz')") in lines
    assert any(ln.startswith("MISSING No module named 'jaxlib") for ln in lines), lines
    assert lines[-1] == "10.0"


def test_sample_is_a_fixed_hash_of_the_id():
    ids = [f"pkg/mod_test.py::Case::test_{i}" for i in range(20000)]
    small = {i for i in ids if sampled(i, 0.05)}
    large = {i for i in ids if sampled(i, 0.2)}
    assert small < large  # a larger fraction keeps every test of a smaller one
    assert 800 < len(small) < 1200 and 3600 < len(large) < 4400
    assert sampled(ids[0], 0.05) == (zlib.crc32(ids[0].encode()) % 10000 < 500)
    assert all(sampled(i, 1.0) for i in ids[:100])


def test_causes_differing_only_in_numbers_group_together():
    from tests.ecosystem.report import cause_group
    a = cause_group("TypeError: broadcast_to: shape must be an integer, got TensorShape([2])")
    b = cause_group("TypeError: broadcast_to: shape must be an integer, got TensorShape([4, 7])")
    assert a == b == "TypeError: broadcast_to: shape must be an integer, got TensorShape([...])"
    assert cause_group("expand_dims: axis must be an integer, got range(0, 5)").endswith(
        "range(...)")
    assert cause_group("No module named 'jax.float32x2'") == "No module named 'jax.float32x2'"
    quoted = "einsum: invalid subscript '1' in operand subscripts '...kh1d'"
    assert cause_group(quoted) == quoted


@pytest.mark.skipif("libasan" in os.environ.get("LD_PRELOAD", ""),
                    reason="the toy suite kills itself with SIGSEGV, which ASan's handler (preloaded into the "
                           "harness's pytest processes too) reports in its own way")
def test_run_side_counts_failures_crashes_and_hangs(tmp_path, monkeypatch):
    src = tmp_path / "src"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "things_test.py").write_text(textwrap.dedent("""
        import os, signal, time, pytest
        def test_a_pass(): pass
        def test_b_fail(): raise ValueError("boom\\nsecond line")
        def test_c_skip(): pytest.skip("not here")
        def test_d_crash(): os.kill(os.getpid(), signal.SIGSEGV)
        def test_e_after_crash(): pass
        def test_f_hang():
            signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGALRM])
            time.sleep(60)
        def test_g_after_hang(): pass
    """))
    (src / "pkg" / "broken_test.py").write_text("import no_such_module_abc\ndef test_x(): pass\n")
    monkeypatch.setattr(harness, "GRACE_S", 2)
    lib = Library("toy", "toy", "0", "wheel", ("pkg",), timeout=1)
    site = tmp_path / "site"
    site.mkdir()
    work = tmp_path / "work"
    work.mkdir()
    ids = [f"pkg/things_test.py::test_{n}" for n in
           ("a_pass", "b_fail", "c_skip", "d_crash", "e_after_crash", "f_hang", "g_after_hang")]
    ids.append("pkg/broken_test.py::test_x")
    results, wall = harness.run_side(lib, "jax", ids, str(src), str(site), str(work))
    assert results["pkg/things_test.py::test_a_pass"] == ("passed", "")
    assert results["pkg/things_test.py::test_b_fail"] == ("failed", "ValueError: boom")
    assert results["pkg/things_test.py::test_c_skip"][0] == "skipped"
    assert results["pkg/things_test.py::test_d_crash"] == ("failed", "crash (SIGSEGV)")
    assert results["pkg/things_test.py::test_e_after_crash"] == ("passed", "")
    assert results["pkg/things_test.py::test_f_hang"] == ("failed", "hang")
    assert results["pkg/things_test.py::test_g_after_hang"] == ("passed", "")
    assert results["pkg/broken_test.py::test_x"] == (
        "error", "ModuleNotFoundError: No module named 'no_such_module_abc'")
    assert wall > 0

# library -> fraction of its suite (crc32 sample of the test ids): about 200 tests in all
CI_SUBSET = {"optax": 0.03, "chex": 0.15}
REQUIRED_SHARE = 0.95


@needs_ecosystem
@pytest.mark.parametrize("name", sorted(CI_SUBSET))
def test_library_suite_passes_on_kiln(name):
    pytest.importorskip("jax")
    from tests.ecosystem import report
    from tests.ecosystem.libraries import by_name

    (lib,) = by_name([name])
    root = os.path.join(harness.REPO, "build", "ecosystem")
    res = harness.measure(lib, root, CI_SUBSET[name])
    counts = report.summarize(res)
    assert counts["jax"] > 0, f"{name}: no test passes on JAX: the harness is broken"
    top = "\n".join(f"{n:5d}  {cause}" for cause, n in counts["causes"].most_common(10))
    assert counts["crash"] == 0 and counts["hang"] == 0, f"{name}: kiln crashed or hung:\n{top}"
    assert counts["both"] >= REQUIRED_SHARE * counts["jax"], (
        f"{name}: kiln passes {counts['both']} of the {counts['jax']} tests JAX passes; "
        f"causes:\n{top}")
