"""Whole JAX programs run unchanged on kiln and print JAX's numbers (values pinned from jax 0.10.2,
CPU, running the same file)."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

JAX_OUTPUT = """final loss 0.023256
per-example grad norms [0.41372 0.68222 0.34311 0.10053]
scan 2.65526 [-1.7406  -0.79845  0.92825]
hessian trace 16.65670
logsumexp 2.14685 argsort [3 7 1 4]
take [ 0.88849 -1.28893  1.07096] where 380.90325927734375"""


def _numbers(text):
    out = []
    for tok in text.replace("[", " ").replace("]", " ").split():
        try:
            out.append(float(tok))
        except ValueError:
            pass
    return out


def test_jax_program_gives_jax_numbers():
    import kiln  # the child imports the same kiln as this process (a source tree or an installed wheel)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(kiln.__file__)))
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "jax_program.py")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    got, want = _numbers(p.stdout), _numbers(JAX_OUTPUT)
    assert len(got) == len(want), p.stdout
    for g, w in zip(got, want):
        assert abs(g - w) <= 2e-5 * max(1.0, abs(w)), (g, w, p.stdout)
