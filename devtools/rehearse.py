"""Release rehearsal against a real package index on 127.0.0.1.

``nox -s rehearse`` (or ``PYTHONPATH=python python -m devtools rehearse``) does, bounded in time:

1. build a few cells with ``nox -s build`` (or take ``--dist``);
2. start pypiserver on a free port of 127.0.0.1 (stopped on every exit path);
3. publish with :func:`devtools.publish.publish`, the code ``nox -s release`` runs,
   and check that the index serves exactly the uploaded files (sha256);
4. install ``torch-c-dlpack-ext`` from that index, and only from it, into fresh
   environments and check which wheel pip chose (``pip --report``) and what the
   selector decided (``python -m torch_c_dlpack_ext --json``):

   - ``torch 2.13``: a fresh venv whose torch comes from the normal indexes; the
     combined wheel is installed and the selector defers to torch's own API;
   - ``torch <old>``: a cached env with a real old torch
     (:func:`devtools.torchenv.torch_env`); the combined wheel loads its library;
   - ``no combined wheel``: resolution for a free-threaded Python no combined wheel
     serves (the abi3 wheel serves every CPython with the GIL) picks the universal
     wheel, which defers on torch 2.13 and explains on old torch;

5. upload a different file under an existing name: the index must refuse it and
   keep serving the original bytes.

Dependencies: the local index serves only this project, so pip installs it with
``--no-deps`` after ``packaging`` and ``filelock`` came from the normal indexes
(``pip check`` then confirms nothing is missing). Pointing pip at PyPI as an
extra index instead would let it pick torch-c-dlpack-ext from PyPI, which is the
very thing a rehearsal must rule out. pip runs with ``PIP_CONFIG_FILE`` set to
the null device for these installs, so this machine's pip settings (extra
indexes, wheel folders) cannot supply the package either.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html.parser
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import unittest.mock
import urllib.error
import urllib.request
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.tags import parse_tag

from _torch_c_dlpack_ext_core.errors import CommandError
from _torch_c_dlpack_ext_core.manifest import sha256_of
from _torch_c_dlpack_ext_core.naming import DIST_NAME
from _torch_c_dlpack_ext_core.run import run
from devtools import ROOT, publish, verify
from devtools.distfiles import ReleaseFiles
from devtools.errors import ReleaseError
from devtools.hostenv import find_uv, venv_python

__all__ = [
    "DEFAULT_CELLS",
    "Check",
    "IndexServer",
    "RehearsalOptions",
    "rehearse",
    "served_hashes",
]

#: Cells built by default (matrix.toml cell-id patterns; cells of other platforms are
#: skipped by the build): small enough for CI, yet an abi3 combined wheel holding both
#: C++ ABIs (PyPI's 2.6 is pre-cxx11, 2.8 cxx11) and a GPU library.
DEFAULT_CELLS = ("*-t28_cpu", "*-t28_cuda", "*-t26_cpu_abi0")
#: The old torch installed for real (its cell must be among the built ones).
DEFAULT_OLD_TORCH = "2.8.0"
#: torch with the exchange API built in; pip resolves it from the normal indexes.
NEW_TORCH = "2.13.0"
#: Free-threaded Pythons, the first of which no combined wheel serves makes pip fall back
#: to the universal wheel (the abi3 wheel serves every CPython with the GIL, and abi3
#: does not apply to a free-threaded one).
FOREIGN_PYTHONS = ("3.13t", "3.14t", "3.15t")

SERVER_START_TIMEOUT = 30.0
HTTP_TIMEOUT = 30.0
BUILD_TIMEOUT = 3600.0
INSTALL_TIMEOUT = 1200.0
TORCH_INSTALL_TIMEOUT = 1800.0


def _log(message: str) -> None:
    print(f"[rehearse {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


@dataclasses.dataclass(frozen=True)
class RehearsalOptions:
    """What to rehearse; every field has a command-line flag."""

    cells: tuple[str, ...] = DEFAULT_CELLS
    #: Use these built dists instead of building.
    dist: Path | None = None
    old_torch: str = DEFAULT_OLD_TORCH
    #: Scratch directory (default: a temporary one, removed afterwards).
    workdir: Path | None = None
    #: Overall time budget in seconds; each step also has its own timeout.
    budget: float = 5400.0


@dataclasses.dataclass(frozen=True)
class Check:
    """One row of the final table."""

    name: str
    expected: str
    observed: str
    ok: bool
    detail: str = ""


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self, cap: float) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise ReleaseError("rehearsal time budget exhausted; raise --budget")
        return min(cap, remaining)


# --- the index server -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class IndexServer:
    """pypiserver serving ``directory`` on 127.0.0.1, uploads allowed without auth.

    Use as a context manager: the server is stopped on every exit path.
    """

    def __init__(self, directory: Path, *, log: Path) -> None:
        self.directory = directory
        self.log = log
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def simple_url(self) -> str:
        return f"{self.url}/simple"

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        # A port picked free can be taken before the server binds it: retry.
        for _ in range(3):
            self.port = _free_port()
            cmd = [sys.executable, "-m", "pypiserver", "run", "-p", str(self.port)]
            cmd += ["-i", "127.0.0.1", "-a", ".", "-P", ".", str(self.directory)]
            _log(f"starting pypiserver: {' '.join(cmd)}")
            with self.log.open("ab") as log:
                self._process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
            if self._wait_ready():
                _log(f"index up at {self.simple_url}/ (pid {self._process.pid})")
                return
            self.stop()
        raise ReleaseError(f"pypiserver did not start; see {self.log}")

    def _wait_ready(self) -> bool:
        assert self._process is not None
        end = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < end:
            if self._process.poll() is not None:
                return False
            try:
                with urllib.request.urlopen(f"{self.simple_url}/", timeout=2):
                    return True
            except (urllib.error.URLError, OSError):
                time.sleep(0.2)
        return False

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
        _log(f"index stopped (pid {process.pid})")

    def __enter__(self) -> IndexServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self.hrefs.extend(v for k, v in attrs if k == "href" and v)


def served_hashes(simple_url: str, project: str = DIST_NAME) -> dict[str, str]:
    """``{file name: sha256}`` of a project's files, read from a PEP 503 page."""
    try:
        with urllib.request.urlopen(f"{simple_url}/{project}/", timeout=HTTP_TIMEOUT) as page:
            body = page.read().decode("utf-8")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return {}
        raise ReleaseError(f"{simple_url}/{project}/: HTTP {exc.code}") from None
    parser = _Links()
    parser.feed(body)
    hashes: dict[str, str] = {}
    for href in parser.hrefs:
        url, _, fragment = href.partition("#")
        if not fragment.startswith("sha256="):
            raise ReleaseError(f"index link without a sha256 fragment: {href}")
        hashes[url.rsplit("/", 1)[-1]] = fragment.removeprefix("sha256=")
    return hashes


# --- building and publishing --------------------------------------------------------


def _build(cells: Sequence[str], out: Path, deadline: _Deadline) -> Path:
    _log(f"building cells {', '.join(cells)} with nox -s build")
    cmd = [sys.executable, "-m", "nox", "-s", "build", "--"]
    cmd += ["--cells", ",".join(cells), "--out", str(out)]
    try:
        proc = run(cmd, cwd=ROOT, timeout=deadline.left(BUILD_TIMEOUT))
    except CommandError as exc:
        # nox prints the build's own output on stdout and its log on stderr.
        raise ReleaseError(
            f"nox -s build failed with exit code {exc.returncode}:\n"
            f"{exc.stdout[-4000:]}\n{exc.stderr[-1500:]}"
        ) from None
    sys.stderr.write(proc.stdout[-3000:])
    return out


def _rehearsal_credentials() -> contextlib.AbstractContextManager[Any]:
    # pypiserver runs with authentication off (-a . -P .); twine still wants a
    # username and password in non-interactive mode. Real ones are never needed.
    return unittest.mock.patch.dict(
        os.environ, {"TWINE_USERNAME": "rehearsal", "TWINE_PASSWORD": "rehearsal"}
    )


def _publish(dist: Path, server: IndexServer) -> tuple[ReleaseFiles, list[Check]]:
    with _rehearsal_credentials():
        files = publish.publish(
            dist, repository_url=f"{server.url}/", variants_dir=server.directory
        )
    uploaded = {p.name: sha256_of(p) for p in files.dists()}
    served = served_hashes(server.simple_url)
    checks = [
        Check(
            name="upload",
            expected=f"{len(uploaded)} files served with their sha256",
            observed=f"{len(served)} files served",
            ok=served == uploaded,
            detail="" if served == uploaded else f"uploaded {uploaded}, served {served}",
        )
    ]
    if files.variants_index is not None:
        placed = server.directory / files.variants_index.name
        same = placed.is_file() and sha256_of(placed) == sha256_of(files.variants_index)
        checks.append(
            Check(
                name="variants.json",
                expected="next to the served dists, same bytes",
                observed="present" if same else "missing or different",
                ok=same,
                detail="pypiserver keeps it but serves only dists (PEP 825 index support pending)",
            )
        )
    return files, checks


def _tampered_copy(wheel: Path, out_dir: Path) -> Path:
    # Same file name, different bytes: a valid wheel whose zip comment differs.
    out_dir.mkdir(parents=True, exist_ok=True)
    copy = out_dir / wheel.name
    shutil.copyfile(wheel, copy)
    with zipfile.ZipFile(copy, "a") as archive:
        archive.comment = b"rehearsal: second upload of an existing file name"
    return copy


def _second_upload(files: ReleaseFiles, server: IndexServer, work: Path) -> Check:
    before = served_hashes(server.simple_url)
    on_disk = {p.name: sha256_of(p) for p in server.directory.iterdir() if p.is_file()}
    target = files.wheels[0].path
    copy = _tampered_copy(target, work / "second-upload")
    refused = False
    detail = ""
    with _rehearsal_credentials():
        try:
            publish.twine_upload([copy], f"{server.url}/", skip_existing=False)
        except CommandError as exc:
            refused = True
            lines = (exc.stderr or exc.stdout).strip().splitlines()
            detail = lines[-1] if lines else ""
    after = served_hashes(server.simple_url)
    after_disk = {p.name: sha256_of(p) for p in server.directory.iterdir() if p.is_file()}
    intact = before == after and on_disk == after_disk
    return Check(
        name="second upload",
        expected="refused, served files unchanged",
        observed=("refused" if refused else "ACCEPTED")
        + (", unchanged" if intact else ", CHANGED"),
        ok=refused and intact,
        detail=detail,
    )


# --- installing from the index ------------------------------------------------------


def _isolated_pip_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PIP_CONFIG_FILE"] = os.devnull  # no machine-wide indexes or wheel folders
    for key in list(env):
        if key.startswith("PIP_") and key != "PIP_CONFIG_FILE":
            del env[key]
    return env


def _pip_from_index(
    python: Path,
    server: IndexServer,
    report: Path,
    deadline: _Deadline,
    *,
    target: Path | None = None,
    python_version: str | None = None,
) -> dict[str, Any]:
    """Install torch-c-dlpack-ext from the rehearsal index only; return pip's report.

    ``python_version``: resolve for another CPython (``3.14t``: a free-threaded one)."""
    cmd: list[str | os.PathLike[str]] = [sys.executable, "-m", "pip", "--python", python]
    cmd += ["install", "--no-deps", "--no-cache-dir", "--index-url", f"{server.simple_url}/"]
    cmd += ["--report", report]
    if target is not None:
        cmd += ["--target", target]
    if python_version is not None:
        version = python_version.removesuffix("t")
        cmd += ["--python-version", version, "--only-binary", ":all:"]
        if python_version.endswith("t"):
            cmd += ["--implementation", "cp", "--abi", f"cp{version.replace('.', '')}t"]
    cmd.append(DIST_NAME)
    run(cmd, env=_isolated_pip_env(), timeout=deadline.left(INSTALL_TIMEOUT))
    data: dict[str, Any] = json.loads(report.read_text(encoding="utf-8"))
    return data


def _installed_file(report: dict[str, Any]) -> tuple[str, str]:
    installs = report.get("install") or []
    if len(installs) != 1:
        raise ReleaseError(f"pip installed {len(installs)} distributions, expected 1")
    item = installs[0]
    url = str(item["download_info"]["url"])
    return url.rsplit("/", 1)[-1], str(item["metadata"]["version"])


def _diagnose(
    python: Path, work: Path, *, pythonpath: Path | None = None
) -> tuple[str, str, dict[str, Any]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    # Run from the scratch dir so no source tree can shadow the installed package.
    report = verify.diagnose(python, env=env, cwd=work)
    kind, library = verify.decision_of(report)
    return kind, Path(library).name if library else "-", report


def _wheel_kind(name: str, files: ReleaseFiles) -> str:
    for wheel in files.wheels:
        if wheel.path.name == name:
            if wheel.universal:
                return "universal"
            return "variant" if wheel.variant else "combined"
    return "unknown"


def _scenario(
    name: str,
    *,
    files: ReleaseFiles,
    pip_report: dict[str, Any],
    decision: tuple[str, str, dict[str, Any]],
    want_wheel: str,
    want_kind: str,
    want_library: str | None = None,
) -> Check:
    wheel, version = _installed_file(pip_report)
    kind, library, report = decision
    wheel_kind = _wheel_kind(wheel, files)
    problems = []
    if version != files.version:
        problems.append(f"installed version {version}, released {files.version}")
    if wheel_kind != want_wheel:
        problems.append(f"pip chose a {wheel_kind} wheel, expected a {want_wheel} one")
    if kind != want_kind:
        problems.append(f"selector decided {kind}, expected {want_kind}")
    if want_library is not None and library != want_library:
        problems.append(f"loaded {library}, expected {want_library}")
    if want_kind in ("load", "defer") and not report.get("smoke_test", {}).get("ok"):
        problems.append(f"smoke test failed: {report.get('smoke_test')}")
    if want_kind == "unavailable" and not report["decision"].get("remedy"):
        problems.append("unavailable without a remedy for the user")
    return Check(
        name=name,
        expected=f"{want_wheel} wheel, {want_kind}" + (f" {want_library}" if want_library else ""),
        observed=f"{wheel} -> {kind}" + (f" {library}" if library != "-" else ""),
        ok=not problems,
        detail="; ".join(problems) or str(report["decision"].get("reason", ""))[:160],
    )


def _new_torch_env(work: Path, deadline: _Deadline) -> Path:
    """A fresh venv with torch 2.13, packaging and filelock from the normal indexes."""
    root = work / "env-torch-new"
    run([find_uv(), "venv", "--seed", "--python", sys.executable, root], timeout=120)
    python = venv_python(root)
    _log(f"installing torch=={NEW_TORCH} (machine pip settings apply) into {root}")
    run(
        [python, "-m", "pip", "install", f"torch=={NEW_TORCH}", "packaging", "filelock"],
        timeout=deadline.left(TORCH_INSTALL_TIMEOUT),
    )
    return python


def _expected_library(files: ReleaseFiles, torch: str, backend: str) -> str | None:
    for wheel in files.wheels:
        if wheel.variant or wheel.universal or not verify.installs_here(wheel):
            continue
        for entry in wheel.libraries:
            if entry.torch == torch and entry.backend.value == backend:
                return Path(entry.file).name
    return None


def _foreign_python(files: ReleaseFiles) -> str:
    """A free-threaded CPython no combined wheel of ``files`` serves."""
    combined = [w for w in files.wheels if not w.universal]
    served = {tag.abi for w in combined for triple in w.tags for tag in parse_tag(triple)}
    for python in FOREIGN_PYTHONS:
        if f"cp{python.replace('.', '')}" not in served:
            return python
    raise ReleaseError(f"every Python of {FOREIGN_PYTHONS} has a combined wheel in the release")


def _install_scenarios(
    files: ReleaseFiles, server: IndexServer, work: Path, options: RehearsalOptions,
    deadline: _Deadline,
) -> list[Check]:  # fmt: skip
    from devtools.torchenv import torch_env

    checks = []
    new_python = _new_torch_env(work, deadline)
    _log(f"scenario: torch {NEW_TORCH}, install from the rehearsal index")
    report = _pip_from_index(new_python, server, work / "report-new.json", deadline)
    run([new_python, "-m", "pip", "check"], timeout=120)
    checks.append(
        _scenario(
            f"torch {NEW_TORCH}",
            files=files,
            pip_report=report,
            decision=_diagnose(new_python, work),
            want_wheel="combined",
            want_kind="defer",
        )
    )

    old_minor = ".".join(options.old_torch.split(".")[:2])
    _log(f"preparing an env with a real torch {options.old_torch} (cached)")
    old = torch_env(options.old_torch, importable=True)
    site = work / "site-torch-old"
    _log(f"scenario: torch {options.old_torch}, install from the rehearsal index")
    report = _pip_from_index(old.python, server, work / "report-old.json", deadline, target=site)
    # The package's own dependencies come from the normal indexes, like torch's.
    run(
        [sys.executable, "-m", "pip", "--python", old.python, "install", "--target", site,
         "--no-cache-dir", "packaging>=24", "filelock>=3.12"],
        timeout=deadline.left(INSTALL_TIMEOUT),
    )  # fmt: skip
    # The library of that torch's backend (as the diagnostics describe the torch: its
    # build flavour) is the one to load; if its cell was not built, the selector must
    # explain instead.
    decision = _diagnose(old.python, work, pythonpath=site)
    backend = str((decision[2].get("torch") or {}).get("backend") or "cpu")
    library = _expected_library(files, old_minor, backend)
    checks.append(
        _scenario(
            f"torch {options.old_torch}",
            files=files,
            pip_report=report,
            decision=decision,
            want_wheel="combined",
            want_kind="load" if library else "unavailable",
            want_library=library,
        )
    )

    foreign_python = _foreign_python(files)
    foreign = work / "site-foreign"
    _log(f"scenario: resolution for Python {foreign_python} (no combined wheel)")
    report = _pip_from_index(
        new_python, server, work / "report-foreign.json", deadline,
        target=foreign, python_version=foreign_python,
    )  # fmt: skip
    for label, python, want in (
        (f"py{foreign_python} wheel, torch {NEW_TORCH}", new_python, "defer"),
        (f"py{foreign_python} wheel, torch {options.old_torch}", old.python, "unavailable"),
    ):
        checks.append(
            _scenario(
                label,
                files=files,
                pip_report=report,
                decision=_diagnose(python, work, pythonpath=foreign),
                want_wheel="universal",
                want_kind=want,
            )
        )
    return checks


# --- the rehearsal ------------------------------------------------------------------


def print_table(checks: Sequence[Check]) -> None:
    """The final summary: one row per check."""
    headers = ("check", "expected", "observed", "result")
    rows = [(c.name, c.expected, c.observed, "ok" if c.ok else "FAIL") for c in checks]
    widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(4)]
    line = "  ".join(f"{{:<{w}}}" for w in widths)
    print(line.format(*headers))
    print(line.format(*("-" * w for w in widths)))
    for row, check in zip(rows, checks):
        print(line.format(*row))
        if check.detail and not check.ok:
            print(f"    {check.detail}")


def rehearse(options: RehearsalOptions) -> list[Check]:
    """Run the rehearsal; return its checks (the caller prints and judges them)."""
    deadline = _Deadline(options.budget)
    with contextlib.ExitStack() as stack:
        if options.workdir is None:
            work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tcde-rehearse-")))
        else:
            work = options.workdir
            work.mkdir(parents=True, exist_ok=True)
        dist = options.dist or _build(options.cells, work / "dist", deadline)
        server = stack.enter_context(IndexServer(work / "index", log=work / "pypiserver.log"))
        files, checks = _publish(dist, server)
        if all(c.ok for c in checks):
            checks += _install_scenarios(files, server, work, options, deadline)
            _log("second upload of an existing file name")
            checks.append(_second_upload(files, server, work))
        return checks
