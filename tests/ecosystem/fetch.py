"""Downloads and installs what the ecosystem harness runs, all under build/ecosystem/ (git-ignored).

- dl/: the archives pip downloads (cached: a second run downloads nothing);
- src/<package>-<version>/: the unpacked archive that holds a library's tests, where pytest runs
  (its own pytest configuration is there when the archive has one);
- site/: every library and test dependency, `pip install --no-deps --target`, so the system
  Python's jax, jaxlib, numpy, scipy and ml_dtypes stay as they are.

A library whose archives ship no tests (equinox, diffrax) gets them from a clone of its
repository that the operator names (--repo): the test folder at the pinned tag is extracted into
its src/ tree. Nothing is ever fetched from GitHub.
"""
import hashlib
import io
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile

from .libraries import RUNNER_DEPS


def _pip(args, log):
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check"] + args
    log(" ".join(cmd[2:]))
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)


def _archive(lib, dl):
    """The downloaded archive of `lib`'s tests_from kind, downloading it when missing."""
    stem = lib.package.replace("-", "_") + "-" + lib.version
    want = ".whl" if lib.tests_from == "wheel" else ".tar.gz"
    for name in sorted(os.listdir(dl)) if os.path.isdir(dl) else []:
        if name.lower().startswith(stem.lower()) and name.endswith(want):
            return os.path.join(dl, name)
    spec = f"{lib.package}=={lib.version}"
    kind = ["--only-binary", ":all:"] if lib.tests_from == "wheel" else ["--no-binary", ":all:"]
    _pip(["download", "--no-deps", *kind, spec, "-d", dl], _log)
    return _archive(lib, dl)


def _log(msg):
    print(f"ecosystem: {msg}", flush=True)


def source_tree(lib, root):
    """The unpacked archive holding `lib`'s tests (build/ecosystem/src/<pkg>-<ver>), made once."""
    dest = os.path.join(root, "src", f"{lib.package}-{lib.version}")
    if os.path.isdir(dest):
        return dest
    archive = _archive(lib, os.path.join(root, "dl"))
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    if archive.endswith(".whl"):
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
    else:
        with tarfile.open(archive) as t:
            t.extractall(tmp, filter="data")
        (top,) = os.listdir(tmp)  # an sdist holds one folder, <pkg>-<ver>/
        for name in os.listdir(os.path.join(tmp, top)):
            shutil.move(os.path.join(tmp, top, name), tmp)
        os.rmdir(os.path.join(tmp, top))
    os.replace(tmp, dest)
    _log(f"unpacked {os.path.basename(archive)} into {dest}")
    return dest


def repo_tests(lib, src, git_dir):
    """Extracts `lib.repo_tests` (tag, folder) from the git repository `git_dir` (a checkout or
    a bare mirror, read with `git archive`, never fetched) into `src`, once. Returns the folder."""
    tag, folder = lib.repo_tests
    dest = os.path.join(src, folder)
    if os.path.isdir(dest):
        return dest
    cmd = ["git", "-C", git_dir, "archive", "--format=tar", f"{tag}^{{commit}}", "--", folder]
    proc = subprocess.run(cmd, capture_output=True)
    if proc.returncode != 0 or not proc.stdout:
        why = proc.stderr.decode(errors="replace").strip().splitlines()[-1:] or ["no files"]
        raise SystemExit(f"ecosystem: {lib.name}: cannot read {folder}/ at {tag} from "
                         f"{git_dir}: {why[0]}")
    tmp = dest + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as t:
        t.extractall(tmp, filter="data")
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    os.replace(os.path.join(tmp, folder), dest)
    shutil.rmtree(tmp)
    _log(f"extracted {folder}/ at {tag} from {git_dir} into {src}")
    return dest


def install_site(libs, root):
    """Installs the libraries' wheels and their pinned dependencies into build/ecosystem/site.

    The set is keyed by a hash of the requirement list: a changed pin reinstalls everything.
    """
    reqs = sorted({f"{lib.package}=={lib.version}" for lib in libs}
                  | {d for lib in libs for d in lib.deps} | set(RUNNER_DEPS))
    key = hashlib.sha256("\n".join(reqs).encode()).hexdigest()[:16]
    site = os.path.join(root, "site")
    stamp = os.path.join(site, ".eco-" + key)
    if os.path.exists(stamp):
        return site
    shutil.rmtree(site, ignore_errors=True)
    _pip(["install", "--no-deps", "--no-compile", "--only-binary", ":all:", "--target", site,
          "-q", *reqs], _log)
    with open(stamp, "w") as f:
        f.write("\n".join(reqs) + "\n")
    return site
