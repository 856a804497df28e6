"""Differential fuzzing against JAX, the CI subset (issue 32): a fixed set of seeds of
tests/fuzz's random programs, each run in JAX and kiln under eager, jit, grad, vmap and their
compositions. Fails on any disagreement whose signature (op, transformation, dtype, class) is not
in tests/fuzz/known.py, and on a saved regression (tests/fuzz/regressions/) that disagrees again
after its known.py entry was removed. Known entries that nothing here reproduces are warnings.
The long campaign is `make fuzz` (tests/fuzz/README.md)."""
import os
import sys
import warnings

import pytest

pytest.importorskip("jax")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

from tests.fuzz import known  # noqa: E402
from tests.fuzz.campaign import Campaign, replay, short_repro  # noqa: E402

# 1-3 minutes on two cores; programs are a function of the seed (and of JAX's version)
CI_SEEDS = range(0, 90)


@pytest.fixture(scope="module")
def campaign():
    return Campaign(workers=1, shrink=False).run(CI_SEEDS)


@pytest.fixture(scope="module")
def replayed():
    """Every saved regression re-checked: [(path, signature, outcome class)]."""
    return [(path, sig, cls) for path, sig, cls, _ in replay()]


def _describe(camp, sigs):
    out = []
    for s in sigs:
        d = camp.defects[s]
        out.append(f"{'/'.join(s)} (seeds {d.seeds}): JAX {d.jax[:200]!r}, kiln {d.kiln[:200]!r}\n"
                   f"{short_repro(d)}")
    return "\n\n".join(out)


def test_fuzz_seeds_have_no_new_disagreement(campaign):
    """Every disagreement of the CI seeds is listed in known.py (new ones fail here: fix the
    defect, or list it with a reason)."""
    new = campaign.unknown()
    assert campaign.programs > len(CI_SEEDS) // 2, "the generator rejected most seeds"
    assert not new, f"{len(new)} new disagreement(s) with JAX:\n\n{_describe(campaign, new)}"


def test_fuzz_fixed_regressions_stay_fixed(replayed):
    """A saved regression whose signature is not in known.py (its defect was fixed and its entry
    deleted) agrees with JAX."""
    back = [(path, cls) for path, sig, cls in replayed if cls != "ok" and known.match(sig) is None]
    assert not back, "regressions disagree with JAX again: " + ", ".join(
        f"{os.path.basename(p)} ({cls})" for p, cls in back)


def test_fuzz_stale_known_entries_are_reported(campaign, replayed):
    """known.py entries that neither a CI seed nor a saved regression reproduces: a warning (the
    long campaign may still hit them), never a failure."""
    live = set(campaign.defects) | {sig for _, sig, cls in replayed if cls != "ok"}
    stale = [k for k in known.KNOWN if not any(known.matches(k, s) for s in live)]
    if stale:
        warnings.warn("known.py entries reproduced by no CI seed and no regression file (fixed? "
                      "delete them if `make fuzz` agrees): " + ", ".join("/".join(k[:4]) for k in stale))


def test_fuzz_known_entries_are_well_formed():
    for k in known.KNOWN:
        assert k.status in ("open", "deliberate"), k
        assert k.reason.strip(), k
        assert k.cls in ("wrong_value", "wrong_dtype", "wrong_shape", "wrong_weak_type", "kiln_raises",
                         "jax_raises", "exc_class", "crash", "*"), k
