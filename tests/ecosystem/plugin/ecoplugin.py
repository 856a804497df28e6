"""pytest plugin of the ecosystem harness, loaded with `-p ecoplugin` in both the JAX and kiln runs.

It lists the collected test ids (--eco-collect), keeps only given ids (--eco-ids) or a fixed
hash sample (--eco-sample), and writes one JSON line per event to --eco-out: a test started,
a test's outcome with the first line of its exception, a file that failed to collect. The
harness reads these lines even when the process dies, so it can name the test that crashed.
No JAX import here: the same file serves both sides.
"""
import json
import os
import zlib

import pytest

SAMPLE_BUCKETS = 10000


def sampled(nodeid, fraction):
    """True when the test id falls in the fixed hash sample of `fraction` (0 < fraction <= 1)."""
    return zlib.crc32(nodeid.encode()) % SAMPLE_BUCKETS < round(fraction * SAMPLE_BUCKETS)


def first_line(text, limit=240):
    """The first non-empty line of `text`, cut to `limit` characters."""
    for line in str(text).splitlines():
        if line.strip():
            return line.strip()[:limit]
    return ""


def exception_cause(excinfo):
    """'TypeName: first line of the message' for an ExceptionInfo."""
    return first_line(f"{excinfo.typename}: {excinfo.value}") or excinfo.typename


def longrepr_cause(report):
    """The exception line of a report that has no ExceptionInfo (collection errors)."""
    text = report.longreprtext or ""
    for line in text.splitlines():
        if line.startswith("E "):
            return first_line(line[1:])
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return first_line(lines[-1]) if lines else "collection error"


def pytest_addoption(parser):
    group = parser.getgroup("ecosystem harness")
    group.addoption("--eco-out", default=None, help="JSON-lines file for events and outcomes")
    group.addoption("--eco-ids", default=None, help="file of test ids to run, one a line")
    group.addoption("--eco-sample", type=float, default=None,
                    help="keep the tests whose crc32(id) %% 10000 < FRACTION * 10000")
    group.addoption("--eco-collect", action="store_true", help="write the collected ids")


class _Recorder:
    def __init__(self, config):
        self.config = config
        path = config.getoption("eco_out")
        self.out = open(path, "a", buffering=1) if path else None
        ids_path = config.getoption("eco_ids")
        self.ids = None
        if ids_path:
            with open(ids_path) as f:
                self.ids = {line.rstrip("\n") for line in f if line.strip()}
        self.fraction = config.getoption("eco_sample")
        self.phases = {}  # nodeid -> list of (outcome, cause)

    def write(self, **event):
        if self.out is not None:
            self.out.write(json.dumps(event) + "\n")
            self.out.flush()
            os.fsync(self.out.fileno())

    def pytest_collectreport(self, report):
        if report.failed:
            self.write(event="collect-error", nodeid=report.nodeid, cause=longrepr_cause(report))

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session, config, items):
        keep, drop = [], []
        for item in items:
            wanted = (self.ids is None or item.nodeid in self.ids) and (
                self.fraction is None or sampled(item.nodeid, self.fraction))
            (keep if wanted else drop).append(item)
        if drop:
            config.hook.pytest_deselected(items=drop)
            items[:] = keep
        if config.getoption("eco_collect"):
            for item in items:
                self.write(event="collected", nodeid=item.nodeid)

    def pytest_runtest_logstart(self, nodeid, location):
        self.phases[nodeid] = []
        self.write(event="start", nodeid=nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        cause = ""
        if call.excinfo is not None and not report.passed:
            cause = exception_cause(call.excinfo)
        if hasattr(report, "wasxfail"):
            state = "xfailed" if report.skipped else "xpassed"
        else:
            state = report.outcome
        self.phases.setdefault(item.nodeid, []).append((call.when, state, cause))

    def pytest_runtest_logfinish(self, nodeid, location):
        phases = self.phases.pop(nodeid, [])
        outcome, cause = "passed", ""
        for when, state, why in phases:
            if state == "failed":
                outcome, cause = ("failed" if when == "call" else "error"), why
                break
            if state in ("skipped", "xfailed", "xpassed") and outcome == "passed":
                outcome, cause = state, why
        if not phases:
            outcome, cause = "error", "no report"
        self.write(event="result", nodeid=nodeid, outcome=outcome, cause=cause)


def pytest_configure(config):
    config.pluginmanager.register(_Recorder(config), "ecoplugin-recorder")
