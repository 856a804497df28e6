"""The JAX libraries the ecosystem harness measures: pinned versions, where their tests come from,
which files are tests, and what they need installed. Data only; fetch.py and harness.py read it.

Versions are the newest releases that accept JAX 0.10.2 (checked with `pip download`). Every
package goes into build/ecosystem/site with `pip install --no-deps --target`, so the system
Python's jax, jaxlib, numpy, scipy and ml_dtypes are never touched.
"""
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Library:
    name: str            # the row name in the table ("flax-linen")
    package: str         # the PyPI name
    version: str         # the pinned release
    tests_from: str      # "wheel" or "sdist": the archive whose files hold the tests
    paths: tuple         # test folders or files, relative to the unpacked archive
    ignore: tuple = ()   # paths under `paths` that pytest must not collect
    deps: tuple = ()     # other distributions (pinned) the library or its tests import
    note: str = ""       # what the table must say about this library (e.g. no tests shipped)
    timeout: int = 120   # seconds one test may run before it counts as a hang
    extra_args: tuple = field(default=())  # more pytest arguments of the library's own CI
    repo_tests: tuple = ()  # (tag, folder): tests that live only in the library's repository,
                            # measured when the operator names a clone with --repo (no fetch)


# pure-Python or self-contained wheels; pinned so a rerun measures the same thing
_ABSL = "absl-py==2.5.1"
_CHEX = ("chex==0.1.92", "toolz==1.2.0")
_TREE = ("dm-tree==0.1.10", "cloudpickle==3.1.3")
_OPTAX = "optax==0.2.8"
_EQX = ("equinox==0.13.8", "jaxtyping==0.3.11", "wadler-lindig==0.1.8")
# what the repository tests of equinox and diffrax import beyond the library: their pytest
# configuration passes --jaxtyping-packages=...,beartype.beartype(...) (jaxtyping's plugin)
_EQX_TESTS = ("beartype==0.23.1", _OPTAX, _ABSL, "tqdm==4.70.1") + _CHEX
_JAXTYPING_PLUGIN = ("-p", "jaxtyping._pytest_plugin")  # plugins are not autoloaded
_NO_TESTS = "the sdist ships no tests (they live only in the repository: see --repo)"
_FLAX = ("msgpack==1.2.4", "rich==15.0.0", "markdown-it-py==4.0.0", "mdurl==0.1.2",
         "pygments==2.19.2", "pyyaml==6.0.4", "treescope==0.1.10")
# distrax needs tfp-nightly: tensorflow-probability 0.25.0's JAX substrate fails on JAX 0.10.2
_TFP = ("tfp-nightly==0.26.0.dev20261027", "decorator==5.3.2", "gast==0.7.0")

LIBRARIES = (
    Library("optax", "optax", "0.2.8", "wheel", ("optax",),
            deps=(_ABSL, "scikit-learn==1.9.1", "joblib==1.6.0",
                   "threadpoolctl==3.8.0", "narwhals==2.29.0") + _CHEX),
    Library("chex", "chex", "0.1.92", "wheel", ("chex",),
            deps=(_ABSL,) + _CHEX[1:] + _TREE),
    Library("flax-linen", "flax", "0.12.8", "sdist", ("tests",),
            ignore=("tests/nnx",), deps=(_ABSL, _OPTAX) + _CHEX + _TREE + _FLAX),
    Library("flax-nnx", "flax", "0.12.8", "sdist", ("tests/nnx",),
            deps=(_ABSL, _OPTAX) + _CHEX + _TREE + _FLAX),
    Library("equinox", "equinox", "0.13.8", "sdist", (),
            deps=_EQX[1:] + _EQX_TESTS, note=_NO_TESTS,
            extra_args=_JAXTYPING_PLUGIN, repo_tests=("v0.13.8", "tests")),
    Library("diffrax", "diffrax", "0.7.2", "sdist", (),
            deps=_EQX + ("lineax==0.1.1", "optimistix==0.1.0") + _EQX_TESTS, note=_NO_TESTS,
            extra_args=_JAXTYPING_PLUGIN, repo_tests=("v0.7.2", "test")),
    Library("numpyro", "numpyro", "0.22.0", "sdist", ("test",),
            deps=("multipledispatch==1.0.0", "tqdm==4.70.1", _OPTAX) + _CHEX + (_ABSL,)),
    Library("distrax", "distrax", "0.1.9", "wheel", ("distrax",),
            deps=(_ABSL,) + _CHEX + _TREE + _TFP),
    Library("dm-haiku", "dm-haiku", "0.0.17", "wheel", ("haiku",),
            deps=(_ABSL, "jmp==0.0.4", "tabulate==0.10.0", _OPTAX) + _CHEX + _TREE),
    Library("blackjax", "blackjax", "1.7.1", "sdist", ("tests",),
            ignore=("tests/test_multidevice",),
            deps=(_OPTAX, "fastprogress==1.1.6", _ABSL) + _CHEX),
)

# test-runner packages installed beside the libraries (never imported by them)
RUNNER_DEPS = ("pytest-timeout==2.4.0",)


def by_name(names):
    """The libraries named in `names` (all when empty), in table order; unknown names raise."""
    if not names:
        return list(LIBRARIES)
    known = {lib.name: lib for lib in LIBRARIES}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"ecosystem: unknown library {unknown}; known: {sorted(known)}")
    return [known[n] for n in names]
