"""What ``devtools.envs.torchenv`` leaves out of an env, without downloads: the smoke-import
fallback adds back one skipped requirement at a time (torch 2.2-2.4 need NVTX only; the
whole set cost triton's 0.4-0.55 GB per release), a compile-only env drops torch's GPU
kernels and keeps nothing in uv's cache, and observers hear of every env."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path

import pytest
from devtools.base.errors import ProvisionError
from devtools.base.hostenv import DEV_CACHE_VAR
from devtools.envs import envspec, torchenv
from devtools.envs.torchenv import EnvKind

from _torch_c_dlpack_ext_core.errors import CommandError, ConfigError

SKIPPED = [
    "nvidia-nvtx-cu12==12.1.105",
    "nvidia-cuda-nvrtc-cu12==12.1.105",
    "nvidia-cusolver-cu12==11.4.5.107",
    "triton==2.3.1",
]


class FakeUv:
    """uv's and the smoke import's calls, recorded; the import works once every package
    of ``import_needs`` is installed; ``torch==`` installs lay out a CUDA torch's lib/."""

    def __init__(self, root: Path, import_needs: Sequence[str]) -> None:
        self.root = root
        self.import_needs = set(import_needs)
        self.installed: set[str] = set()
        self.calls: list[tuple[str, ...]] = []

    def uv(self, uv: str, *args: str) -> None:
        self.calls.append(args)
        if args[:2] != ("pip", "install"):
            return
        self.installed.update(a.split("==")[0] for a in args if not a.startswith("-"))
        if any(a.startswith("torch==") for a in args):
            lib = self.root / "lib" / "python3.11" / "site-packages" / "torch" / "lib"
            lib.mkdir(parents=True)
            for name in ("libtorch_cpu.so", "libc10.so", "libc10_cuda.so", "libtorch_cuda.so",
                         "libtorch_cuda_linalg.so"):  # fmt: skip
                (lib / name).write_bytes(b"\x7fELF" + name.encode())

    def run(self, cmd: Sequence[object], **_: object) -> subprocess.CompletedProcess[str]:
        missing = self.import_needs - self.installed
        if missing:
            raise CommandError(
                [str(c) for c in cmd], 1, "", f"OSError: {sorted(missing)[0]} not found\n"
            )
        return subprocess.CompletedProcess([str(c) for c in cmd], 0, "2.3.1+cu121\n", "")

    def installs(self) -> list[tuple[str, ...]]:
        return [c[4:] for c in self.calls if c[:2] == ("pip", "install")]


@pytest.fixture
def fake(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeUv:
    root = tmp_path / "env"
    uv = FakeUv(root, import_needs=["nvidia-nvtx-cu12"])
    monkeypatch.setattr(torchenv, "_uv", uv.uv)
    monkeypatch.setattr(torchenv, "run", uv.run)
    monkeypatch.setattr(
        torchenv,
        "import_requirements",
        lambda *a: (["nvidia-cuda-runtime-cu12==12.1.105"], SKIPPED),
    )
    return uv


def test_a_failed_import_adds_back_one_requirement_at_a_time_and_stops(fake: FakeUv) -> None:
    record = torchenv._create(
        fake.root, "uv", "2.3.1", python="3.11", kind=EnvKind.IMPORTABLE, extra=("pytest",)
    )
    installs = fake.installs()
    assert installs[-1] == ("nvidia-nvtx-cu12==12.1.105",)
    assert not any("triton==2.3.1" in args for args in installs)
    assert record["added_for_import"] == ["nvidia-nvtx-cu12==12.1.105"]
    assert record["requirements"] == [
        "nvidia-cuda-runtime-cu12==12.1.105",
        "nvidia-nvtx-cu12==12.1.105",
    ]


def test_a_torch_that_never_imports_is_a_provision_error_naming_the_last_failure(
    fake: FakeUv,
) -> None:
    fake.import_needs = {"libtorch_global_deps"}
    with pytest.raises(ProvisionError, match=r"fails even with .*triton==2\.3\.1.*not found"):
        torchenv._create(fake.root, "uv", "2.3.1", python="3.11", kind=EnvKind.IMPORTABLE, extra=())
    assert [args[-1] for args in fake.installs()[-4:]] == SKIPPED


def test_skipped_requirements_come_in_the_order_they_are_added_back(tmp_path: Path) -> None:
    info = tmp_path / "torch-2.3.1.dist-info"
    info.mkdir()
    linux = '; platform_system == "Linux" and platform_machine == "x86_64"'
    lines = [f"Requires-Dist: {r.replace('==', ' (==')}){linux}" for r in reversed(SKIPPED)]
    (info / "METADATA").write_text("Name: torch\n" + "\n".join(lines) + "\n", encoding="utf-8")
    import platform

    if (platform.system(), platform.machine()) != ("Linux", "x86_64"):
        pytest.skip("the markers select Linux x86_64")
    _, skipped = torchenv.import_requirements(tmp_path, "2.3.1", "3.11")
    assert skipped == SKIPPED


def test_a_compile_only_env_drops_the_gpu_kernels_and_bypasses_uvs_cache(fake: FakeUv) -> None:
    record = torchenv._create(
        fake.root, "uv", "2.15.0", python="3.11", kind=EnvKind.COMPILE_ONLY, extra=("x-headers",)
    )
    (torch_install,) = [c for c in fake.installs() if "torch==2.15.0" in c]
    assert "--no-cache" in fake.calls[1]
    assert torch_install[-1] == "torch==2.15.0"
    lib = fake.root / "lib" / "python3.11" / "site-packages" / "torch" / "lib"
    assert sorted(p.name for p in lib.iterdir()) == [
        "libc10.so",
        "libc10_cuda.so",
        "libtorch_cpu.so",
    ]
    assert sorted(record["dropped"]) == ["libtorch_cuda.so", "libtorch_cuda_linalg.so"]  # type: ignore[call-overload]
    # The header wheels still come through uv's cache.
    assert fake.installs()[-1] == ("x-headers",)


def test_each_kind_keeps_the_name_of_the_envs_already_cached() -> None:
    names = {kind: envspec.env_name("2.15.0", "3.11", kind, ()) for kind in EnvKind}
    assert names == {
        EnvKind.NO_DEPS: "py3.11-torch2.15.0",
        EnvKind.IMPORTABLE: "py3.11-torch2.15.0-import",
        EnvKind.COMPILE_ONLY: "py3.11-torch2.15.0-build",
    }


def test_an_importable_compile_only_env_cannot_be_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEV_CACHE_VAR, str(tmp_path))
    # The two booleans that could say both are gone: their keywords are refused.
    with pytest.raises(TypeError, match="importable"):
        torchenv.torch_env("2.15.0", importable=True, compile_only=True)  # type: ignore[call-arg]
    # A kind is one of EnvKind's: a bool or a string is refused, naming the kinds.
    for kind in (True, "compile-only"):
        with pytest.raises(ConfigError, match=r"not an environment kind.*EnvKind\.COMPILE_ONLY"):
            torchenv.torch_env("2.15.0", kind=kind)  # type: ignore[arg-type]
    assert not (tmp_path / "envs").exists()


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, bool | None]] = []

    def before(self, root: Path) -> None:
        self.events.append(("before", root.name, (root / torchenv.MARKER).is_file()))

    def after(self, root: Path, created: bool) -> None:
        self.events.append(("after", root.name, created))


def test_observers_hear_of_each_env_before_and_after_and_whether_it_was_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEV_CACHE_VAR, str(tmp_path))

    def fake_create(path: Path, *args: object, **kwargs: object) -> dict[str, object]:
        (path / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        return {"seconds": 0.0}

    monkeypatch.setattr(torchenv, "_create", fake_create)
    recorder = Recorder()
    torchenv.torch_env("2.6.0", kind=EnvKind.NO_DEPS, python="3.11", observer=recorder)
    torchenv.torch_env("2.6.0", kind=EnvKind.NO_DEPS, python="3.11", observer=recorder)
    torchenv.torch_env("2.6.0", kind=EnvKind.NO_DEPS, python="3.11")
    assert recorder.events == [
        ("before", "py3.11-torch2.6.0", False),
        ("after", "py3.11-torch2.6.0", True),
        ("before", "py3.11-torch2.6.0", True),
        ("after", "py3.11-torch2.6.0", False),
    ]


def test_an_observer_that_refuses_stops_the_env_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DEV_CACHE_VAR, str(tmp_path))

    def no_create(*args: object, **kwargs: object) -> dict[str, object]:
        raise AssertionError("refused env was made")

    class Refuses(Recorder):
        def before(self, root: Path) -> None:
            raise ConfigError(f"not here: {root.name}")

    monkeypatch.setattr(torchenv, "_create", no_create)
    refuser = Refuses()
    with pytest.raises(ConfigError, match=r"not here: py3\.11-torch2\.6\.0-import"):
        torchenv.torch_env("2.6.0", kind=EnvKind.IMPORTABLE, python="3.11", observer=refuser)
    assert not (tmp_path / "envs" / "py3.11-torch2.6.0-import").exists()
    assert json.dumps(refuser.events) == "[]"


def test_two_observers_each_hear_only_of_the_envs_they_were_passed_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The observer is the caller's, passed per call: two in one process (two plugins, two
    threads) never hear of each other's envs, and an Observers group tells each member."""
    monkeypatch.setenv(DEV_CACHE_VAR, str(tmp_path))

    def fake_create(path: Path, *args: object, **kwargs: object) -> dict[str, object]:
        (path / "lib" / "python3.11" / "site-packages").mkdir(parents=True)
        return {"seconds": 0.0}

    monkeypatch.setattr(torchenv, "_create", fake_create)
    first, second, both = Recorder(), Recorder(), Recorder()
    torchenv.torch_env("2.6.0", kind=EnvKind.NO_DEPS, python="3.11", observer=first)
    (tmp_path / "envs" / "tree-py3.11-torch2.6.0").mkdir(parents=True)
    (tmp_path / "envs" / "tree-py3.11-torch2.6.0" / torchenv.MARKER).write_text("{}")
    torchenv.torch_tree("2.6.0", python="3.11", observer=torchenv.Observers((second, both)))
    torchenv.torch_env(
        "2.6.0", kind=EnvKind.IMPORTABLE, python="3.11", observer=torchenv.Observers((both,))
    )
    assert [e[1] for e in first.events] == ["py3.11-torch2.6.0"] * 2
    assert [e[1] for e in second.events] == ["tree-py3.11-torch2.6.0"] * 2
    assert [e[1] for e in both.events] == ["tree-py3.11-torch2.6.0"] * 2 + [
        "py3.11-torch2.6.0-import"
    ] * 2


def test_torchenv_keeps_no_observer_of_its_own() -> None:
    """No registry: nothing to add an observer to, and no module-level container that
    could hold one."""
    assert not hasattr(torchenv, "add_observer")
    assert not hasattr(torchenv, "remove_observer")
    containers = {
        name: value
        for name, value in vars(torchenv).items()
        if isinstance(value, (list, set)) and not name.startswith("__")
    }
    assert containers == {}, containers
