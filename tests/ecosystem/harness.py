"""Runs each JAX library's own tests twice, on real JAX and on kiln (through hook/), on the same
test ids, and records one outcome and cause per test and side.

Each test file runs in its own pytest process (the library's own configuration, cwd = its
unpacked archive). A process that dies (signal) or stops writing events for `timeout` + 30 s is
killed; the test it was running counts as a failure with cause "crash (...)" or "hang", and the
file's remaining tests run in a fresh process. JAX results are cached per library version and
sample, so a rerun only reruns kiln.
"""
import collections
import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

from . import fetch
from .plugin.ecoplugin import sampled

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PLUGIN_DIR = os.path.join(HERE, "plugin")
HOOK_DIR = os.path.join(HERE, "hook")
KILN_PYTHON = os.path.join(REPO, "python")
EMPTY_INI = os.path.join(PLUGIN_DIR, "empty.ini")
GRACE_S = 30  # beyond the per-test timeout, how long a silent process may live


def _log(msg):
    print(f"ecosystem: {msg}", flush=True)


def side_env(side, site):
    """The environment of one side's pytest processes: the kiln side alone gets the hook."""
    # KILN_NUM_CPU_DEVICES is kiln's own suite's (tests/conftest.py): it would pin the device count
    # the libraries' suites set through XLA_FLAGS (chex.set_n_cpu_devices)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PYTEST_ADDOPTS", "KILN_NUM_CPU_DEVICES")}
    paths = [PLUGIN_DIR, site]
    if side == "kiln":
        paths = [HOOK_DIR, KILN_PYTHON] + paths
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["JAX_PLATFORMS"] = "cpu"
    env["KILN_PLATFORM"] = "cpu"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONHASHSEED"] = "0"
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the plugins are named on the command line
    return env


def pytest_config(src):
    """The library's own pytest configuration file in its unpacked archive, in pytest's order of
    precedence, or EMPTY_INI: without one, pytest would take kiln's own (an ancestor folder)."""
    for name, marker in (("pytest.ini", ""), (".pytest.ini", ""),
                         ("pyproject.toml", "[tool.pytest.ini_options]"),
                         ("tox.ini", "[pytest]"), ("setup.cfg", "[tool:pytest]")):
        path = os.path.join(src, name)
        if os.path.isfile(path):
            with open(path, errors="replace") as f:
                if marker in f.read():
                    return path
    return EMPTY_INI


def _pytest_cmd(lib, src, site, args):
    cmd = [sys.executable, "-m", "pytest", "-p", "ecoplugin", "-p", "no:cacheprovider",
           f"--rootdir={src}", "-c", pytest_config(src), "-q", "--no-header", "-rN",
           "--color=no"]
    if os.path.exists(os.path.join(site, "pytest_timeout.py")):
        cmd += ["-p", "pytest_timeout", f"--timeout={lib.timeout}"]
    for path in lib.ignore:
        cmd.append(f"--ignore={path}")
    return cmd + list(lib.extra_args) + list(args)


def _read_events(path):
    events = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    events.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by a crash
    return events


def _run_watched(cmd, cwd, env, events_path, log_path, silence_s):
    """Runs `cmd`; kills it (its process group) when `events_path` stays unchanged for
    `silence_s` seconds. Returns (returncode, hung)."""
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        last_size, last_change = -1, time.monotonic()
        try:
            while proc.poll() is None:
                time.sleep(0.5)
                size = os.path.getsize(events_path) if os.path.exists(events_path) else 0
                if size != last_size:
                    last_size, last_change = size, time.monotonic()
                elif time.monotonic() - last_change > silence_s:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return proc.returncode, True
        finally:  # the harness interrupted (Ctrl-C, SIGTERM): its pytest goes with it
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        return proc.returncode, False


def collect(lib, src, site, work):
    """The library's test ids, collected on real JAX, and its files' collection errors."""
    events_path = os.path.join(work, "collect.jsonl")
    if os.path.exists(events_path):
        os.remove(events_path)
    cmd = _pytest_cmd(lib, src, site, ["--collect-only", "--eco-collect",
                                       f"--eco-out={events_path}", *lib.paths])
    log_path = os.path.join(work, "collect.log")
    if os.path.exists(log_path):
        os.remove(log_path)
    rc, hung = _run_watched(cmd, src, side_env("jax", site), events_path, log_path, 600)
    events = _read_events(events_path)
    ids = [e["nodeid"] for e in events if e["event"] == "collected"]
    if not ids or hung or rc not in (0, 1, 2):
        with open(log_path, errors="replace") as f:
            tail = f.read()[-3000:]
        raise SystemExit(f"ecosystem: {lib.name}: collection on JAX failed (exit {rc}, "
                         f"{len(ids)} tests); {log_path} ends:\n{tail}")
    errors = {e["nodeid"]: e["cause"] for e in events if e["event"] == "collect-error"}
    return ids, errors


def _file_of(nodeid):
    return nodeid.split("::", 1)[0]


def run_side(lib, side, ids, src, site, work):
    """Runs `ids` on one side, file by file. Returns ({id: (outcome, cause)}, wall seconds)."""
    by_file = collections.OrderedDict()
    for nodeid in ids:
        by_file.setdefault(_file_of(nodeid), []).append(nodeid)
    results = {}
    env = side_env(side, site)
    start = time.monotonic()
    for n, (path, file_ids) in enumerate(by_file.items()):
        pending = list(file_ids)
        while pending:
            ids_path = os.path.join(work, f"{side}.ids")
            events_path = os.path.join(work, f"{side}.jsonl")
            with open(ids_path, "w") as f:
                f.write("\n".join(pending) + "\n")
            if os.path.exists(events_path):
                os.remove(events_path)
            cmd = _pytest_cmd(lib, src, site,
                              [f"--eco-ids={ids_path}", f"--eco-out={events_path}", path])
            rc, hung = _run_watched(cmd, src, env, events_path,
                                    os.path.join(work, f"{side}.log"), lib.timeout + GRACE_S)
            if rc == 4:  # pytest's usage error: the harness's fault, not the library's
                raise SystemExit(f"ecosystem: pytest usage error in {lib.name} [{side}] {path}; "
                                 f"see {os.path.join(work, side + '.log')}")
            events = _read_events(events_path)
            started = [e["nodeid"] for e in events if e["event"] == "start"]
            for e in events:
                if e["event"] == "result":
                    cause = e["cause"]
                    if "Timeout (>" in cause:  # pytest-timeout's interrupt
                        cause = "hang"
                    results[e["nodeid"]] = (e["outcome"], cause)
            collect_errors = [e["cause"] for e in events if e["event"] == "collect-error"]
            left = [i for i in pending if i not in results]
            if not left:
                break
            unfinished = [i for i in started if i not in results]
            if (hung or rc < 0 or rc not in (0, 1, 2, 5)) and unfinished:
                victim = unfinished[-1]
                why = "hang" if hung else f"crash ({_signal_name(rc)})"
                results[victim] = ("failed", why)
                pending = [i for i in left if i != victim]
                continue
            if collect_errors:
                why = collect_errors[0]
            elif hung:
                why = "hang (collection)"
            elif rc < 0:
                why = f"crash ({_signal_name(rc)}, collection)"
            else:
                why = f"not collected on {side}"
            for i in left:
                results[i] = ("error", why)
            break
        passed = sum(results[i][0] == "passed" for i in file_ids)
        _log(f"{lib.name} [{side}] {n + 1}/{len(by_file)} {path}: {passed}/{len(file_ids)} passed")
    return results, time.monotonic() - start


def _signal_name(rc):
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit {rc}"


def _result_path(lib, root, sample):
    return os.path.join(root, "results", f"{lib.name}-{lib.version}-sample{sample:g}.json")


def saved_result(lib, root, sample=None):
    """The last saved measurement of `lib` at `sample` (None: the newest of any), or None."""
    if sample is not None:
        paths = [_result_path(lib, root, sample)]
    else:
        folder = os.path.join(root, "results")
        prefix = f"{lib.name}-{lib.version}-sample"
        paths = sorted((os.path.join(folder, n) for n in os.listdir(folder)
                        if n.startswith(prefix) and n.endswith(".json")
                        and not n.endswith(".jax.json")) if os.path.isdir(folder) else (),
                       key=os.path.getmtime)[-1:]
    paths = [p for p in paths if os.path.exists(p)]
    if not paths:
        return None
    with open(paths[0]) as f:
        return json.load(f)


def measure(lib, root, sample, rerun_jax=False, kiln_state="", repo=None):
    """Measures one library: collection on JAX, the sample, both sides. Returns a result dict
    (what report.py tabulates), also saved to build/ecosystem/results/. `repo`: a clone of the
    library's repository, whose tests (`lib.repo_tests`) are measured when its archives have none."""
    if repo and lib.repo_tests and not lib.paths:
        tag, folder = lib.repo_tests
        lib = dataclasses.replace(lib, paths=(folder,), note=f"tests from the repository at {tag} "
                                  f"(`{folder}/`; the sdist ships none)")
    work = os.path.join(root, "work", lib.name)
    os.makedirs(work, exist_ok=True)
    results_dir = os.path.join(root, "results")
    os.makedirs(results_dir, exist_ok=True)
    base = {"library": lib.name, "package": lib.package, "version": lib.version,
            "sample": sample, "note": lib.note, "kiln_state": kiln_state}
    if not lib.paths:
        return dict(base, collected_total=0, ids=[], jax={}, kiln={}, wall={}, collect_errors={})
    site = fetch.install_site(_all_libraries(), root)
    src = fetch.source_tree(lib, root)
    if repo and lib.repo_tests:
        fetch.repo_tests(lib, src, repo)
    # the key names what decides the JAX outcomes: version, sample, pinned dependencies
    deps_hash = hashlib.sha256("\n".join(sorted(lib.deps)).encode()).hexdigest()[:8]
    stem = f"{lib.name}-{lib.version}-sample{sample:g}"
    jax_key = os.path.join(results_dir, f"{stem}-deps{deps_hash}.jax.json")
    if os.path.exists(jax_key) and not rerun_jax:
        with open(jax_key) as f:
            jax_part = json.load(f)
        _log(f"{lib.name}: JAX results cached ({jax_key})")
    else:
        _log(f"{lib.name}: collecting on JAX")
        all_ids, collect_errors = collect(lib, src, site, work)
        ids = [i for i in all_ids if sampled(i, sample)]
        _log(f"{lib.name}: {len(all_ids)} tests collected, {len(ids)} in the sample {sample:g}, "
             f"{len(collect_errors)} files failed to collect on JAX")
        jax_results, jax_wall = run_side(lib, "jax", ids, src, site, work)
        jax_part = {"collected_total": len(all_ids), "ids": ids, "collect_errors": collect_errors,
                    "results": jax_results, "wall": jax_wall}
        with open(jax_key, "w") as f:
            json.dump(jax_part, f, indent=1)
    kiln_results, kiln_wall = run_side(lib, "kiln", jax_part["ids"], src, site, work)
    out = dict(base, collected_total=jax_part["collected_total"], ids=jax_part["ids"],
               collect_errors=jax_part["collect_errors"],
               jax={k: tuple(v) for k, v in jax_part["results"].items()},
               kiln=kiln_results, wall={"jax": jax_part["wall"], "kiln": kiln_wall})
    with open(_result_path(lib, root, sample), "w") as f:
        json.dump(out, f, indent=1)
    return out


def _all_libraries():
    from .libraries import LIBRARIES
    return LIBRARIES
