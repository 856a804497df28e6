"""kiln's coverage of JAX's public API: each name JAX exports (tests/api_names.py, generated from
JAX) must be in kiln's matching module, unless DELIBERATELY_ABSENT lists it. A name that exists
but raises NotImplementedError counts as present. Does not import JAX.

`PYTHONPATH=python python3 tests/test_api_coverage.py` prints the README's coverage table.
"""
import importlib

import pytest

from api_names import JAX_VERSION, NAMES

# Each group of names (a module; its `*_p` primitive objects count apart) must have at least
# this share of the names kiln aims for (the listed ones less the deliberately absent).
MIN_COVERAGE = 0.95

# JAX names kiln leaves out on purpose: JAX's internals and multi-device machinery. Everything
# else JAX lists is expected; add a name here only with the reason beside it.
DELIBERATELY_ABSENT = {
    "jax": {
        "jax2tf_associative_scan_reductions",  # a config of jax2tf (export to TensorFlow)
    },
}


def _kiln_module(jax_module_name):
    """kiln's module for a JAX module name, or None where kiln has no such module."""
    try:
        return importlib.import_module("kiln" + jax_module_name[len("jax"):])
    except ModuleNotFoundError:
        return None


def _present(module, name):
    if module is None:
        return False
    try:
        getattr(module, name)
    except AttributeError:
        return False
    except NotImplementedError:
        return True
    return True


def _missing(jax_module_name):
    module = _kiln_module(jax_module_name)
    return [n for n in NAMES[jax_module_name] if not _present(module, n)]


def _is_primitive_object(name):
    """JAX's `*_p` names are its Primitive objects (jaxpr internals); kiln's primitives are rows of
    its C table (ir/prim.h), not Python objects, so these are not expected."""
    return name.endswith("_p")


def _groups():
    """(label, JAX module, names) per module, without JAX's `*_p` primitive objects."""
    for module_name, names in NAMES.items():
        yield module_name, module_name, [n for n in names if not _is_primitive_object(n)]


GROUPS = list(_groups())


@pytest.mark.parametrize("module_name", list(NAMES))
def test_every_jax_name_is_in_kiln_or_deliberately_absent(module_name):
    unexpected = sorted(n for n in set(_missing(module_name)) - DELIBERATELY_ABSENT.get(module_name, set())
                        if not _is_primitive_object(n))
    assert not unexpected, f"kiln{module_name[3:]} lacks jax's {unexpected}"


def test_deliberately_absent_names_are_jax_names_kiln_lacks():
    """Keeps the allow-list honest: an entry kiln has gained, or JAX never had, is stale."""
    stale = {module: sorted(names - set(_missing(module)) if module in NAMES else names)
             for module, names in DELIBERATELY_ABSENT.items()}
    assert not any(stale.values()), f"remove from DELIBERATELY_ABSENT: {stale}"


@pytest.mark.parametrize("label, module_name, names", GROUPS, ids=[g[0] for g in GROUPS])
def test_coverage_of_each_group_is_at_least_95_percent(label, module_name, names):
    aimed = [n for n in names if n not in DELIBERATELY_ABSENT.get(module_name, set())]
    missing = set(_missing(module_name)) & set(aimed)
    coverage = (len(aimed) - len(missing)) / len(aimed) if aimed else 1.0
    assert coverage >= MIN_COVERAGE, f"{label}: {coverage:.1%} of jax's names, lacks {sorted(missing)}"


def coverage_table():
    """The README's markdown table; jax.scipy.stats' distribution submodules make one row."""
    distributions = [m for m in NAMES if m.startswith("jax.scipy.stats.")]
    rows = {}
    for label, module_name, names in GROUPS:
        if module_name in distributions:
            label = f"jax.scipy.stats.norm etc. ({len(distributions)} modules)"
        missing = set(_missing(module_name))
        listed, present = rows.get(label, (0, 0))
        rows[label] = (listed + len(names), present + sum(n not in missing for n in names))
    lines = [f"| module (JAX {JAX_VERSION}) | JAX names | in kiln | coverage |", "|---|---:|---:|---:|"]
    for label, (listed, present) in rows.items():
        lines.append(f"| {label} | {listed} | {present} | {present / listed:.0%} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(coverage_table())
