"""Installing ``torch-c-dlpack-ext`` from the rehearsal's local index, and judging the
result (the install scenarios of ``nox -s rehearse``, :mod:`devtools.rehearse.rehearsal`).

Each scenario installs from that index and only from it into a fresh environment and
reads pip's ``--report`` (which wheel was installed) and ``python -m torch_c_dlpack_ext
--json`` (what the selector decided), one :class:`Check` each:

- ``torch 2.13``: a fresh venv whose torch comes from the normal indexes; the combined
  wheel is installed and the selector defers to torch's own API;
- ``torch <old>``: a cached env with a real old torch
  (:func:`devtools.envs.torchenv.torch_env`); the combined wheel loads its library;
- ``no combined wheel``: resolution for a free-threaded Python no combined wheel serves
  (the abi3 wheel serves every CPython with the GIL) picks the universal wheel, which
  defers on torch 2.13 and explains on old torch.

Dependencies: the local index serves only this project, so pip installs it with
``--no-deps`` after ``packaging`` and ``filelock`` came from the normal indexes (``pip
check`` then confirms nothing is missing). Pointing pip at PyPI as an extra index instead
would let it pick torch-c-dlpack-ext from PyPI, which is the very thing a rehearsal must
rule out. pip runs with ``PIP_CONFIG_FILE`` set to the null device for these installs, so
this machine's pip settings (extra indexes, wheel folders) cannot supply the package either.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from packaging.tags import parse_tag

from _torch_c_dlpack_ext_core.naming import DIST_NAME, python_target_tags
from _torch_c_dlpack_ext_core.run import run
from devtools.base.errors import ReleaseError
from devtools.base.hostenv import venv_python
from devtools.base.steps import find_uv
from devtools.rehearse.indexserver import IndexServer, log
from devtools.release import diagnose
from devtools.release.distfiles import ReleaseFiles, installs_here

__all__ = ["NEW_TORCH", "Check", "Deadline", "install_scenarios"]

#: torch with the exchange API built in; pip resolves it from the normal indexes.
NEW_TORCH = "2.13.0"
#: Free-threaded Pythons, the first of which no combined wheel serves makes pip fall back
#: to the universal wheel (the abi3 wheel serves every CPython with the GIL, and abi3
#: does not apply to a free-threaded one).
FOREIGN_PYTHONS = ("3.13t", "3.14t", "3.15t")

INSTALL_TIMEOUT = 1200.0
TORCH_INSTALL_TIMEOUT = 1800.0


@dataclasses.dataclass(frozen=True)
class Check:
    """One row of the rehearsal's final table."""

    name: str
    expected: str
    observed: str
    ok: bool
    detail: str = ""


class Deadline:
    """The rehearsal's overall time budget; each step's timeout is capped by what is left."""

    def __init__(self, seconds: float) -> None:
        self.end = time.monotonic() + seconds

    def left(self, cap: float) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise ReleaseError("rehearsal time budget exhausted; raise --budget")
        return min(cap, remaining)


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
    deadline: Deadline,
    *,
    target: Path | None = None,
    python_version: str | None = None,
) -> dict[str, object]:
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
            cmd += ["--implementation", "cp", "--abi", python_target_tags(python_version)[1]]
    cmd.append(DIST_NAME)
    run(cmd, env=_isolated_pip_env(), timeout=deadline.left(INSTALL_TIMEOUT))
    data = json.loads(report.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ReleaseError(f"pip's --report {report} holds no JSON object")
    return data


def _installed_file(report: Mapping[str, object]) -> tuple[str, str]:
    installs = report.get("install") or []
    if not isinstance(installs, list) or len(installs) != 1:
        count = len(installs) if isinstance(installs, list) else "no list of"
        raise ReleaseError(f"pip installed {count} distributions, expected 1")
    item = installs[0]
    url = str(item["download_info"]["url"])
    return url.rsplit("/", 1)[-1], str(item["metadata"]["version"])


def _diagnose(
    python: Path, work: Path, *, pythonpath: Path | None = None
) -> tuple[str, str, dict[str, object]]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    # Run from the scratch dir so no source tree can shadow the installed package.
    report = diagnose.diagnose(python, env=env, cwd=work)
    kind, library = diagnose.decision_of(report)
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
    pip_report: Mapping[str, object],
    decision: tuple[str, str, Mapping[str, object]],
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
    if want_kind in ("load", "defer") and not diagnose.report_table(report, "smoke_test").get("ok"):
        problems.append(f"smoke test failed: {report.get('smoke_test')}")
    if want_kind == "unavailable" and not diagnose.report_table(report, "decision").get("remedy"):
        problems.append("unavailable without a remedy for the user")
    return Check(
        name=name,
        expected=f"{want_wheel} wheel, {want_kind}" + (f" {want_library}" if want_library else ""),
        observed=f"{wheel} -> {kind}" + (f" {library}" if library != "-" else ""),
        ok=not problems,
        detail="; ".join(problems)
        or str(diagnose.report_table(report, "decision").get("reason", ""))[:160],
    )


def _new_torch_env(work: Path, deadline: Deadline) -> Path:
    """A fresh venv with torch 2.13, packaging and filelock from the normal indexes."""
    root = work / "env-torch-new"
    run([find_uv(), "venv", "--seed", "--python", sys.executable, root], timeout=120)
    python = venv_python(root)
    log(f"installing torch=={NEW_TORCH} (machine pip settings apply) into {root}")
    run(
        [python, "-m", "pip", "install", f"torch=={NEW_TORCH}", "packaging", "filelock"],
        timeout=deadline.left(TORCH_INSTALL_TIMEOUT),
    )
    return python


def _expected_library(files: ReleaseFiles, torch: str, backend: str) -> str | None:
    for wheel in files.wheels:
        if wheel.variant or wheel.universal or not installs_here(wheel):
            continue
        for entry in wheel.libraries:
            if (
                entry.torch == torch
                and entry.backend is not None
                and entry.backend.value == backend
            ):
                return Path(entry.file).name
    return None


def _foreign_python(files: ReleaseFiles) -> str:
    """A free-threaded CPython no combined wheel of ``files`` serves."""
    combined = [w for w in files.wheels if not w.universal]
    served = {tag.abi for w in combined for triple in w.tags for tag in parse_tag(triple)}
    for python in FOREIGN_PYTHONS:
        if python_target_tags(python)[1] not in served:
            return python
    raise ReleaseError(f"every Python of {FOREIGN_PYTHONS} has a combined wheel in the release")


def install_scenarios(
    files: ReleaseFiles, server: IndexServer, work: Path, *, old_torch: str, deadline: Deadline
) -> list[Check]:
    """The scenarios of the module docstring, against ``server`` serving ``files``;
    ``old_torch``: the real old torch release (X.Y.Z) to install."""
    from devtools.envs.torchenv import EnvKind, torch_env

    checks = []
    new_python = _new_torch_env(work, deadline)
    log(f"scenario: torch {NEW_TORCH}, install from the rehearsal index")
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

    old_minor = ".".join(old_torch.split(".")[:2])
    log(f"preparing an env with a real torch {old_torch} (cached)")
    old = torch_env(old_torch, kind=EnvKind.IMPORTABLE)
    site = work / "site-torch-old"
    log(f"scenario: torch {old_torch}, install from the rehearsal index")
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
    backend = str(diagnose.report_table(decision[2], "torch").get("backend") or "cpu")
    library = _expected_library(files, old_minor, backend)
    checks.append(
        _scenario(
            f"torch {old_torch}",
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
    log(f"scenario: resolution for Python {foreign_python} (no combined wheel)")
    report = _pip_from_index(
        new_python, server, work / "report-foreign.json", deadline,
        target=foreign, python_version=foreign_python,
    )  # fmt: skip
    for label, python, want in (
        (f"py{foreign_python} wheel, torch {NEW_TORCH}", new_python, "defer"),
        (f"py{foreign_python} wheel, torch {old_torch}", old.python, "unavailable"),
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
