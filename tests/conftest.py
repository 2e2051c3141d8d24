"""Session fixtures shared by the whole test tree.

- ``fake_torch``: factory for a torch installation's *files* (version.py, CMake
  config, lib markers) in ``tmp_path``, for unit tests of :class:`TorchInstall`
  and the driver's validation;
- ``dlpack_include``: a DLPack 1.3 header directory of known content;
- ``build_cache``: where integration tests keep built libraries across runs
  (the driver's cache key makes an unchanged rebuild a no-op);
- ``torch213_library``: csrc/ compiled against the running torch;
- ``old_torch_env``: factory for importable envs with an old PyPI torch;
- ``portable_library``: the portable library (``csrc/portable``), compiled;
- ``torch23_env``: PyPI's torch 2.3.1 (below the matrix) with apache-tvm-ffi;
- ``_plain_output`` (autouse): no GitHub Actions variables, so a test sees the plain
  output also when the suite runs on GitHub's runners (tests of
  :mod:`devtools.base.ghactions` set them themselves);
- ``progress``: write a line to the terminal past pytest's output capture;
  ``_torchenv_progress`` (autouse) sends ``devtools.envs.torchenv``'s progress lines there
  (creating an env takes minutes).

Two options of this suite: ``--shard NAME`` runs one shard (``tests/shards.py``: the tests
grouped by the torch environments they need; ``quick`` is the contributors' subset) and
refuses any environment the shard does not list, in this process and (through
``TCDE_SHARD``) in its subprocesses; ``--footprint FILE`` writes what each test module and
environment added to the disk, how long it took and each skip's reason
(``tests/footprint.py``).

One marker of this suite: ``needs_root`` (a test that must run as root: other uids,
mounts, chroots). Run by anyone else it is skipped, saying so; CI runs these tests in a
step of their own with ``sudo`` (``pytest -m needs_root``), the others as the runner's
unprivileged user (``-m "not needs_root"``).

This file is also the parent conftest of ``tests/exchange_suite``, which runs
inside old-torch environments that lack this project's dependencies: project
imports therefore happen inside fixtures, never at module level.
"""

from __future__ import annotations

import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from devtools.envs.torchenv import EnvObserver, TorchEnv

    from _torch_c_dlpack_ext_core.manifest import ManifestEntry

ROOT = Path(__file__).resolve().parents[1]

FakeTorch = Callable[..., Path]


Progress = Callable[[str], None]


NEEDS_ROOT = "needs_root"
#: Why a ``needs_root`` test is skipped for anyone but root; a CI job's skip check does not
#: count it where the job's sudo step ran (devtools.testkit.footprinttables.ROOT_ONLY_REASON).
ROOT_ONLY = f"{NEEDS_ROOT}: runs as root only (CI: the sudo step, pytest -m {NEEDS_ROOT})"


def _shard_names() -> str:
    try:
        from tests.shards import selectable
    except ImportError:  # inside an old-torch env (the exchange suite): no shards there
        return "tests/shards.py"
    return ", ".join(shard.name for shard in selectable())


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torch-c-dlpack-ext")
    group.addoption(
        "--shard",
        default=None,
        metavar="NAME",
        help=f"run one shard of the suite (tests/shards.py: {_shard_names()})",
    )
    group.addoption(
        "--footprint",
        default=None,
        metavar="FILE",
        help="write the run's footprint (disk and time per test module and torch env) to "
        "FILE as JSON (python -m devtools footprint renders it)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{NEEDS_ROOT}: must run as root (other uids, mounts, chroots); skipped for anyone "
        "else, run by CI in a sudo step (pytest -m needs_root)",
    )
    name = config.getoption("shard", default=None)
    shard = None
    if name is not None:
        from tests.shards import shard_named

        try:
            shard = shard_named(name)
        except KeyError as exc:
            raise pytest.UsageError(f"--shard: {exc.args[0]}") from None
        config.pluginmanager.register(ShardGuard(shard), "tcde-shard")
        _shard_for_subprocesses(shard)
    out = config.getoption("footprint", default=None)
    if out is not None:
        from tests.footprint import FootprintPlugin

        plugin = FootprintPlugin(config, _writable_record(out), name or "all")
        config.pluginmanager.register(plugin, "tcde-footprint")


def _shard_for_subprocesses(shard: Any) -> None:
    """``$TCDE_SHARD``: devtools (here and in the subprocesses the tests start) refuses an
    env outside ``shard`` too (``devtools.envs.shardcheck``)."""
    try:
        from devtools.base.hostenv import dev_cache_root
        from devtools.envs.shardcheck import SHARD_VARIABLE, shard_value
    except ImportError:  # inside an old-torch env (the exchange suite): nothing to guard
        return
    os.environ[SHARD_VARIABLE] = shard_value(
        shard.name, dev_cache_root() / "envs", shard.env_patterns
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``needs_root`` tests, saying why, for anyone but root."""
    if not hasattr(os, "geteuid") or os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason=ROOT_ONLY)
    for item in items:
        if item.get_closest_marker(NEEDS_ROOT) is not None:
            item.add_marker(skip)


def _writable_record(value: str) -> Path:
    """``--footprint``'s FILE, checked before any test runs: its folder made and writable
    (the record is written when the run ends, which a bad path would otherwise lose)."""
    if not value.strip():
        raise pytest.UsageError("--footprint: an empty FILE; name the JSON file to write")
    path = Path(value).resolve()
    if path.is_dir():
        raise pytest.UsageError(f"--footprint: {path} is a folder; name a file in it")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}."):
            pass
    except OSError as exc:
        raise pytest.UsageError(
            f"--footprint: cannot write {path} ({exc.strerror or exc}); name a file in a "
            "folder you can write"
        ) from None
    return path


class ShardGuard:
    """``--shard``: keeps the shard's tests, and refuses (as the running test's failure,
    before any download) a torch environment the shard does not list."""

    def __init__(self, shard: Any) -> None:
        self.shard = shard
        self.current: str | None = None
        self.envs: Path | None = None

    def selected(self, item: pytest.Item) -> bool:
        from tests.shards import selects

        return selects(self.shard, item.nodeid, [mark.name for mark in item.iter_markers()])

    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        keep = [item for item in items if self.selected(item)]
        dropped = [item for item in items if not self.selected(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = keep

    def pytest_sessionstart(self) -> None:
        try:
            from devtools.base.hostenv import dev_cache_root
        except ImportError:  # inside an old-torch env (the exchange suite): nothing to guard
            return
        self.envs = dev_cache_root() / "envs"

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Iterator[None]:
        self.current = item.nodeid
        yield
        self.current = None

    def before(self, root: Path) -> None:
        # Only the dev cache's envs: unit tests make stand-ins under their tmp_path.
        if self.envs is None or root.parent != self.envs or self.shard.allows(root.name):
            return
        from tests.shards import SHARDS

        having = [s.name for s in SHARDS if s.allows(root.name)]
        pytest.fail(
            f"{self.current} uses the torch env {root.name}, which shard {self.shard.name!r} "
            f"does not provide (it provides {', '.join(self.shard.env_patterns) or 'none'}); "
            f"list the test under the shard that has it in tests/shards.py "
            f"({', '.join(having) or 'none has it yet: add it to one'})",
            pytrace=False,
        )

    def after(self, root: Path, created: bool) -> None:
        del root, created


#: What switches devtools' output to GitHub Actions' workflow commands.
GITHUB_VARIABLES = ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "CIBUILDWHEEL", "TCDE_GITHUB_GROUP")


@pytest.fixture(autouse=True)
def _plain_output(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in GITHUB_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="session")
def progress(request: pytest.FixtureRequest) -> Progress:
    """``progress(line)`` writes to pytest's terminal even while it captures output: for
    steps that run for minutes (creating a torch env, installing in a fresh venv)."""
    capture = request.config.pluginmanager.getplugin("capturemanager")
    terminal = request.config.pluginmanager.getplugin("terminalreporter")
    lock = threading.Lock()

    def show(line: str) -> None:
        if capture is None or terminal is None:
            print(line, file=sys.stderr, flush=True)
            return
        with lock, capture.global_and_fixture_disabled():
            terminal.write_line(line)

    return show


@pytest.fixture(scope="session", autouse=True)
def _torchenv_progress(progress: Progress) -> Iterator[None]:
    """Show ``devtools.envs.torchenv``'s progress (which env, what is installing, elapsed)."""
    try:
        from devtools.envs import torchenv
    except ImportError:  # inside an old-torch env (the exchange suite): nothing to show
        yield
        return
    torchenv.set_progress(progress)
    try:
        yield
    finally:
        torchenv.set_progress(None)


@pytest.fixture
def fake_torch(tmp_path: Path) -> FakeTorch:
    """Factory: ``fake_torch(version="2.6.0+cu124", abi=False, cuda="12.4", ...)`` builds
    ``<tmp>/<name>/lib/python3.11/site-packages/torch`` and returns the venv-like prefix."""

    def make(
        version: str = "2.6.0+cu124",
        *,
        abi: bool | None = False,
        cmake_file: str = "Torch/TorchConfig.cmake",
        cuda: str | None = "12.4",
        hip: str | None = None,
        libs: tuple[str, ...] = ("libc10.so", "libtorch_cpu.so"),
        name: str = "env",
    ) -> Path:
        prefix = tmp_path / name
        torch_dir = prefix / "lib" / "python3.11" / "site-packages" / "torch"
        (torch_dir / "include" / "torch" / "csrc" / "api" / "include").mkdir(parents=True)
        (torch_dir / "lib").mkdir()
        # The same shape torch writes; the exit call proves the file is parsed, never run.
        (torch_dir / "version.py").write_text(
            "from typing import Optional\nimport os\nos._exit(3)\n"
            f"__version__ = {version!r}\ndebug = False\n"
            f"cuda: Optional[str] = {cuda!r}\nhip: Optional[str] = {hip!r}\n",
            encoding="utf-8",
        )
        if abi is not None:
            cmake = torch_dir / "share" / "cmake" / cmake_file
            cmake.parent.mkdir(parents=True)
            cmake.write_text(
                'if(CMAKE_SYSTEM_NAME STREQUAL "Linux")\n'
                f'  set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI={int(abi)}")\nendif()\n',
                encoding="utf-8",
            )
        for lib in libs:
            (torch_dir / "lib" / lib).write_bytes(b"\x7fELF fake " + lib.encode())
        return prefix

    return make


@pytest.fixture
def dlpack_include(tmp_path: Path) -> Path:
    """A directory holding ``dlpack/dlpack.h`` that declares DLPack 1.3."""
    root = tmp_path / "dlpack-include"
    (root / "dlpack").mkdir(parents=True)
    (root / "dlpack" / "dlpack.h").write_text(
        "#ifndef DLPACK_DLPACK_H_\n#define DLPACK_DLPACK_H_\n"
        "#define DLPACK_MAJOR_VERSION 1\n#define DLPACK_MINOR_VERSION 3\n#endif\n",
        encoding="utf-8",
    )
    return root


@pytest.fixture(scope="session")
def build_cache() -> Path:
    """``$TCDE_TEST_BUILD_CACHE`` or the repo's ``.cache/test-builds``.

    Kept across runs on purpose: the driver's cache key turns an unchanged
    rebuild into a no-op, which is what keeps ``nox -s tests`` fast on re-runs.
    """
    override = os.environ.get("TCDE_TEST_BUILD_CACHE")
    path = Path(override) if override else ROOT / ".cache" / "test-builds"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def torch213_library(build_cache: Path) -> tuple[Path, ManifestEntry]:
    """csrc/ compiled against the running torch (2.13 in ``nox -s tests``), CPU backend.

    Returns ``(library path, manifest entry)``. Cached across runs by the driver.
    """
    torch = pytest.importorskip("torch")
    from _torch_c_dlpack_ext_core.driver import BuildRequest, compile_library

    entry = compile_library(
        BuildRequest(
            torch=Path(torch.__file__).parent,
            backend="cpu",
            output_dir=build_cache / f"running-py{sys.version_info[0]}{sys.version_info[1]}",
        )
    )
    path = build_cache / f"running-py{sys.version_info[0]}{sys.version_info[1]}" / entry.file
    return path, entry


@pytest.fixture(scope="session")
def portable_library(build_cache: Path) -> Path:
    """csrc/portable built as shipped (abi3, ``Py_LIMITED_API=0x03090000``) against the
    running interpreter's headers, by ``tests.helpers.build_portable_library`` (a stand-in
    for the release driver's build; a C compile of about a second, so not cached)."""
    from tests.helpers import build_portable_library

    return build_portable_library(build_cache / "portable-abi3")


#: The plugins that watch the torch envs this process makes: ``--shard``'s guard and
#: ``--footprint``'s recorder (registered under these names when asked for).
ENV_WATCHERS = ("tcde-shard", "tcde-footprint")


@pytest.fixture(scope="session")
def env_observer(request: pytest.FixtureRequest) -> EnvObserver:
    """The ``observer`` to pass every ``torch_env``/``torch_tree`` call a test makes: the
    run's shard guard and footprint recorder, those of :data:`ENV_WATCHERS` this run has
    (none: an observer that does nothing). Envs made in subprocesses are guarded by
    ``$TCDE_SHARD`` and found by the footprint recorder when their test module ends."""
    return env_watchers(request.config.pluginmanager)


def env_watchers(plugins: Any) -> EnvObserver:
    """The :data:`ENV_WATCHERS` registered with ``plugins`` (a plugin manager) as one
    observer, in that order (the shard guard refuses before the recorder starts)."""
    from devtools.envs.torchenv import Observers

    found = (plugins.getplugin(name) for name in ENV_WATCHERS)
    return Observers(tuple(plugin for plugin in found if plugin is not None))


@pytest.fixture(scope="session")
def old_torch_env(env_observer: EnvObserver) -> Callable[[str], TorchEnv]:
    """Factory: ``old_torch_env("2.6.0")`` -> the suite's importable env with PyPI's torch
    2.6.0 (``tests.helpers.suite_env``: created once under the dev cache, then reused)."""
    from tests.helpers import suite_env

    def make(version: str) -> TorchEnv:
        env: TorchEnv = suite_env(version, observer=env_observer)
        return env

    return make


@pytest.fixture(scope="session")
def suite_interpreter(env_observer: EnvObserver) -> Callable[[str], Path | str]:
    """Factory: ``suite_interpreter("2.8.0")`` -> the Python of that release's suite env,
    ``suite_interpreter("running")`` -> this one (``tests.helpers.suite_python``)."""
    from tests.helpers import suite_python

    def interpreter(version: str) -> Path | str:
        return suite_python(version, observer=env_observer)

    return interpreter


@pytest.fixture(scope="session")
def torch23_env(env_observer: EnvObserver) -> TorchEnv:
    """PyPI's torch 2.3.1 (older than the matrix) for CPython 3.11, the suite's importable
    env, with apache-tvm-ffi (created once under the dev cache; skips on another CPython)."""
    from tests.helpers import OLD_TORCH, suite_env

    if sys.version_info[:2] != (3, 11):
        pytest.skip(f"the torch {OLD_TORCH} env is made for CPython 3.11; this is {sys.version}")
    env: TorchEnv = suite_env(OLD_TORCH, python="3.11", observer=env_observer)
    return env
