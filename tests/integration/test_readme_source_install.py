"""README's "Installing from source" recipe, run EXACTLY as printed, against a local index.

A new user runs the block in a fresh directory. Here pip reaches no index but a
pypiserver this test starts on 127.0.0.1 (``PIP_INDEX_URL``, with pip's machine-wide
settings off: ``PIP_CONFIG_FILE=/dev/null``). The index holds what PyPI would hold: the
build requirements and CUDA header wheel the recipe names (downloaded from PyPI into the
index folder, with their dependencies) and torch-c-dlpack-ext's sdists.

What is arranged beforehand, and why: torch 2.8.0 with its CUDA wheels is 3.4 GB, so
instead of serving it, ``venv/`` is created first with the same ``python3 -m venv venv``
and torch 2.8.0 is put in it with all its requirements by uv (from uv's cache, hard
links); the recipe's ``python3 -m venv venv`` keeps them and its ``pip install
torch==2.8.0 ...`` finds torch satisfied. ``nvcc`` is taken off PATH and ``CUDA_HOME``
unset, as on a machine without a CUDA toolkit, so the CUDA library compiles against the
header wheels the recipe installs. Everything else runs verbatim, twice:

1. the index as PyPI has it before this release: 0.1.5's sdist only. The recipe must not
   build 0.1.5 (it fails: "invalid command 'bdist_wheel'"); pip says there is no
   ``torch-c-dlpack-ext==<this version>``;
2. after the release: this version's sdist too. The recipe builds it (CPU and CUDA
   libraries for torch 2.8.0) and ``python -m torch_c_dlpack_ext --json`` loads one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import build_backend
import pytest
from tests.helpers import clean_env
from tests.unit.test_readme_recipes import source_recipe

from _torch_c_dlpack_ext_core.installsource import pinned_requirement

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (sys.platform.startswith("linux") and os.uname().machine == "x86_64"),
        reason="the recipe installs PyPI's linux_x86_64 torch 2.8.0 (CUDA 12.8)",
    ),
]

Progress = Callable[[str], None]
#: The release PyPI holds before this one, and its sdist's sha256 on PyPI.
OLD_RELEASE = "0.1.5"
OLD_SDIST_SHA256 = "d06f0357d575d22a168cc77acb9020fc4bae30968ceb6718a055dcbe92bacabe"


def _recipe() -> list[str]:
    lines = source_recipe()
    assert lines[0] == "python3 -m venv venv && . venv/bin/activate", lines
    assert lines[1].startswith("pip install torch==2.8.0 "), lines
    assert lines[-1].split()[-1] == pinned_requirement(), lines
    return lines


def _served_requirements(lines: list[str]) -> list[str]:
    """What the recipe asks pip for besides torch and this project: the index must hold it."""
    wanted = []
    for line in lines[1:-1]:
        words = shlex.split(line.split("#", 1)[0])
        assert words[:2] == ["pip", "install"], line
        wanted += [w for w in words[2:] if not w.startswith("torch==")]
    return wanted


def _path_without_nvcc() -> str:
    """PATH less the directories holding ``nvcc``: a machine without a CUDA toolkit."""
    parts = os.environ.get("PATH", "").split(os.pathsep)
    return os.pathsep.join(p for p in parts if p and not (Path(p) / "nvcc").exists())


def _environment(index_url: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in clean_env().items()
        if not k.startswith(("PIP_", "CUDA_", "VIRTUAL_ENV", "PYTHONPATH"))
    }
    env.update(
        PATH=_path_without_nvcc(),
        PIP_CONFIG_FILE=os.devnull,  # no machine-wide find-links, indexes or caps
        PIP_INDEX_URL=index_url,
        PIP_NO_CACHE_DIR="1",  # build the sdist now, never reuse an earlier run's wheel
        PIP_DISABLE_PIP_VERSION_CHECK="1",
    )
    return env


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def _index(directory: Path, log: Path) -> Iterator[str]:
    """pypiserver serving ``directory`` on 127.0.0.1, never falling back to PyPI."""
    port = _free_port()
    cmd = [sys.executable, "-m", "pypiserver", "run", "-p", str(port), "-i", "127.0.0.1",
           "-a", ".", "-P", ".", "--disable-fallback", str(directory)]  # fmt: skip
    with log.open("ab") as out:
        server = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/simple/"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2):
                    break
            except (urllib.error.URLError, OSError):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"pypiserver did not start: {log.read_text()}") from None
                time.sleep(0.2)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(timeout=10)


def _old_sdist(directory: Path) -> Path:
    """PyPI's 0.1.5 sdist (found through PyPI's simple page, sha256-checked, kept in the
    developer cache)."""
    from devtools.base.hostenv import dev_cache_root

    name = f"torch_c_dlpack_ext-{OLD_RELEASE}.tar.gz"
    cached = dev_cache_root() / "downloads" / name
    if not cached.is_file():
        page = (
            urllib.request.urlopen("https://pypi.org/simple/torch-c-dlpack-ext/", timeout=60)
            .read()
            .decode()
        )
        (url,) = {u for u in re.findall(r'href="([^"#]+)', page) if u.endswith("/" + name)}
        data = urllib.request.urlopen(url, timeout=120).read()
        assert hashlib.sha256(data).hexdigest() == OLD_SDIST_SHA256
        cached.parent.mkdir(parents=True, exist_ok=True)
        partial = cached.with_name(f".{name}.{os.getpid()}.tmp")
        partial.write_bytes(data)
        os.replace(partial, cached)
    assert hashlib.sha256(cached.read_bytes()).hexdigest() == OLD_SDIST_SHA256
    return Path(shutil.copy(cached, directory / name))


def _bash(
    script: str, cwd: Path, env: dict[str, str], what: str, progress: Progress
) -> subprocess.CompletedProcess[str]:
    progress(f"[readme source] {what} ...")
    started = time.monotonic()
    proc = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", script],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    progress(
        f"[readme source] {what}: exit {proc.returncode} in {time.monotonic() - started:.0f} s"
    )
    return proc


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory, progress: Progress) -> tuple[Path, Path]:
    """(the user's directory with ``venv/`` holding torch 2.8.0, the index folder)."""
    from devtools.base.steps import find_uv

    lines = _recipe()
    work = tmp_path_factory.mktemp("readme-source")
    index = work / "index"
    index.mkdir()
    env = _environment("https://pypi.org/simple/")
    progress("[readme source] downloading what the recipe installs into the index folder")
    download = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--only-binary", ":all:", "-d", str(index),
         *_served_requirements(lines)],
        env=env, capture_output=True, text=True, timeout=1800, check=False,
    )  # fmt: skip
    assert download.returncode == 0, download.stdout + download.stderr
    _old_sdist(index)

    user = work / "user"
    user.mkdir()
    python3 = shutil.which("python3", path=env["PATH"])
    assert python3, "the recipe runs python3 from PATH"
    made = subprocess.run([python3, "-m", "venv", "venv"], cwd=user, env=env, check=False)
    assert made.returncode == 0
    progress("[readme source] putting torch 2.8.0 and its requirements into venv/ with uv")
    # PyPI by uv's own spelling of it: with a trailing slash uv keeps the wheels under
    # another index and unpacks torch 2.8.0 and its CUDA wheels a second time (6.3 GiB).
    uv = subprocess.run(
        [find_uv(), "pip", "install", "--python", str(user / "venv" / "bin" / "python"),
         "--default-index", "https://pypi.org/simple", "torch==2.8.0"],
        env=env, capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    assert uv.returncode == 0, uv.stderr
    return user, index


def test_before_the_release_the_recipe_refuses_pypis_old_sdist(
    prepared: tuple[Path, Path], progress: Progress
) -> None:
    user, index = prepared
    assert sorted(p.name for p in index.glob("torch_c_dlpack_ext-*")) == [
        f"torch_c_dlpack_ext-{OLD_RELEASE}.tar.gz"
    ]
    with _index(index, user.parent / "pypiserver-old.log") as url:
        proc = _bash("\n".join(_recipe()), user, _environment(url), "recipe, 0.1.5 only", progress)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output
    assert f"No matching distribution found for {pinned_requirement()}" in output, output
    assert "bdist_wheel" not in output  # 0.1.5 was never tried
    assert not list((user / "venv").glob("lib/python3*/site-packages/torch_c_dlpack_ext*"))


def test_after_the_release_the_recipe_builds_this_version_as_printed(
    prepared: tuple[Path, Path], progress: Progress
) -> None:
    user, index = prepared
    sdist = build_backend.build_sdist(str(index))
    with _index(index, user.parent / "pypiserver-new.log") as url:
        proc = _bash("\n".join(_recipe()), user, _environment(url), "recipe, as printed", progress)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-6000:]
    assert f"Successfully installed {pinned_requirement().replace('==', '-')}" in output
    assert "Requirement already satisfied: torch==2.8.0" in output
    python = user / "venv" / "bin" / "python"
    report = subprocess.run(
        [str(python), "-m", "torch_c_dlpack_ext", "--json"],
        cwd=user, env=_environment(url), capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    data = json.loads(report.stdout)
    assert data["package"]["version"] == pinned_requirement().split("==")[1]
    assert str(data["package"]["path"]).startswith(str(user / "venv"))
    built = sorted((e["torch"], e["backend"]) for e in data["bundled"])
    # The env's torch (CPU and CUDA), and the portable table.
    assert built == [("2.8", "cpu"), ("2.8", "cuda"), ("any", "any")], data["bundled"]
    assert data["decision"]["kind"] == "load", data["decision"]
    assert sdist in {p.name for p in index.iterdir()}
