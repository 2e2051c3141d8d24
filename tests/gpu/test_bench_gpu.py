"""``python -m benchmarks --device cuda`` (benchmarks/gpu.py) where no GPU is: it refuses with
a typed error, its ``--dry-run`` runs every step on CPU tensors (the three tables, every
member, the Python path) and writes a result the pages refuse to render; the harness hands
the allocator and the stream the device it is given; the committed pages match the
committed GPU result (or say "not measured yet" without one)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from benchmarks import gpu, gpu_report
from benchmarks.harness import build_harness
from tests.exchange_suite import dlpack_ctypes as dl

from _torch_c_dlpack_ext_core.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
COMMITTED = ROOT / "benchmarks" / "results" / f"{gpu.KIND}.json"


def _bench(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_C_DLPACK_EXT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT)])
    return subprocess.run(
        [sys.executable, "-m", "benchmarks", "--device", "cuda", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout, check=False,
    )  # fmt: skip


def _gpu_present() -> bool:
    torch = pytest.importorskip("torch")
    return bool(torch.cuda.is_available())


# --- the harness's device arguments ---------------------------------------------------------


class DeviceRecorder:
    """A table whose allocator and stream getter record the device they are asked for."""

    def __init__(self) -> None:
        self.devices: list[tuple[str, int, int]] = []
        self.shape = (ctypes.c_int64 * 1)(16)
        self._keep: list[Any] = []
        self._deleter = dl.DELETER(lambda managed: None)
        self.api = dl.DLPackExchangeAPI()
        self.api.header.version.major = 1
        self.api.managed_tensor_allocator = dl.ALLOCATOR(self._allocate)
        self.api.current_work_stream = dl.CURRENT_WORK_STREAM(self._stream)

    def _allocate(self, prototype: Any, out: Any, ctx: Any, set_error: Any) -> int:
        device = prototype.contents.device
        self.devices.append(("allocator", device.device_type, device.device_id))
        managed = dl.DLManagedTensorVersioned()
        managed.deleter = self._deleter
        self._keep.append(managed)
        out[0] = ctypes.pointer(managed)
        return 0

    def _stream(self, device_type: int, device_id: int, out: Any) -> int:
        self.devices.append(("stream", device_type, device_id))
        out[0] = None
        return 0


def test_the_harness_hands_the_allocator_and_the_stream_their_device(tmp_path: Path) -> None:
    dll = ctypes.PyDLL(str(build_harness(Path(sys.executable), tmp_path)))
    recorder = DeviceRecorder()
    address = ctypes.addressof(recorder.api)
    for name in ("allocator", "current_work_stream"):
        on = getattr(dll, f"tcde_bench_{name}_on")
        on.restype, on.argtypes = ctypes.c_int64, [
            ctypes.c_void_p, ctypes.py_object, ctypes.c_int64, ctypes.c_int32, ctypes.c_int32
        ]  # fmt: skip
        assert on(address, ["t"], 2, dl.DLDeviceType.kDLCUDA, 3) >= 0
        plain = getattr(dll, f"tcde_bench_{name}")
        plain.restype = ctypes.c_int64
        plain.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_int64]
        assert plain(address, ["t"], 1) >= 0
    cuda, cpu = dl.DLDeviceType.kDLCUDA, dl.DLDeviceType.kDLCPU
    assert recorder.devices == [
        ("allocator", cuda, 3), ("allocator", cuda, 3), ("allocator", cpu, 0),
        ("stream", cuda, 3), ("stream", cuda, 3), ("stream", cpu, 0),
    ]  # fmt: skip


# --- the command line ----------------------------------------------------------------------


@pytest.mark.slow
def test_without_a_gpu_it_refuses_with_a_typed_error(tmp_path: Path) -> None:
    if _gpu_present():
        pytest.skip("a GPU is present: --device cuda measures here")
    proc = _bench("--work-dir", str(tmp_path), timeout=300)
    assert proc.returncode == gpu.DeviceUnavailableError.exit_code, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --device cuda: torch "), last
    assert "add --dry-run" in last
    assert not (tmp_path / "results-quick").exists()
    assert not list(tmp_path.rglob(f"{gpu.KIND}.json")), "nothing measured, nothing written"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--only", "exchange"], "--device cuda runs the exchange benchmark only; drop --only"),
        (["--full"], "--device cuda runs the exchange benchmark only; drop --full"),
        (["--dry-run", "--results-dir", "benchmarks/results"], "never go to benchmarks/results"),
    ],
)
def test_options_the_cuda_mode_does_not_take_are_refused(
    tmp_path: Path, args: list[str], message: str
) -> None:
    proc = _bench("--work-dir", str(tmp_path), *args, timeout=120)
    assert proc.returncode == ConfigError.exit_code, proc.stderr[-2000:]
    assert message in proc.stderr.strip().splitlines()[-1]
    assert not list(tmp_path.iterdir()), "refused before anything ran"


def test_dry_run_belongs_to_the_cuda_mode(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)])}
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--dry-run", "--work-dir", str(tmp_path)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == ConfigError.exit_code, proc.stderr[-2000:]
    assert "--dry-run belongs to --device cuda" in proc.stderr


@pytest.fixture(scope="module")
def dry_run(build_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One dry run (its libraries cached with the test builds); its result document."""
    pages = [(ROOT / "docs" / "benchmarks.md").read_bytes(), (ROOT / "README.md").read_bytes()]
    results = tmp_path_factory.mktemp("results")
    proc = _bench("--dry-run", "--work-dir", str(build_cache), "--results-dir", str(results))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
    assert [(ROOT / "docs" / "benchmarks.md").read_bytes(), (ROOT / "README.md").read_bytes()] == (
        pages
    ), "a dry run renders nothing"
    document: dict[str, Any] = json.loads((results / f"{gpu.KIND}.json").read_text())
    document["stdout"] = proc.stdout
    return document


@pytest.mark.slow
def test_dry_run_times_every_member_of_the_three_tables(dry_run: dict[str, Any]) -> None:
    data = dry_run["data"]
    assert dry_run["kind"] == gpu.KIND
    assert data["dry_run"] is True
    assert data["errors"] == {}, data["errors"]
    rounds = data["settings"]["rounds"]
    assert set(data["providers"]) == set(gpu.TABLES)
    for table, members in data["providers"].items():
        assert set(members) == set(gpu.MEMBERS), table
        assert all(stats["count"] == rounds and stats["median"] > 0 for stats in members.values())
    assert set(data["python_path"]) == set(gpu.PYTHON_PATHS)
    assert all(s["count"] == rounds and s["median"] > 0 for s in data["python_path"].values())
    # The native table is the CUDA library on a CUDA torch (it serves CPU tensors too).
    torch = pytest.importorskip("torch")
    assert data["native_backend"] == ("cuda" if torch.version.cuda else "cpu")
    assert data["device"]["name"].startswith("none (dry run")
    assert "CPU tensors (a dry run)" in dry_run["stdout"]
    assert [t["title"].split(",")[0] for t in dry_run["tables"]] == [
        "Exchange overhead",
        "C API vs Python path",
    ]


@pytest.mark.slow
def test_the_pages_refuse_a_dry_run(dry_run: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match=r"is a dry run \(CPU tensors\)"):
        gpu_report.check_real_run(dry_run, "exchange-cuda.json")
    short = {**dry_run, "data": {**dry_run["data"], "dry_run": False}}
    with pytest.raises(ConfigError, match=r"has 3 rounds; the pages show medians of at least 15"):
        gpu_report.check_real_run(short, "exchange-cuda.json")


@pytest.mark.slow
def test_a_real_runs_figures_are_what_the_pages_show(dry_run: dict[str, Any]) -> None:
    """The rendering of a result shaped as a real run's (the dry run's own numbers, so each
    figure on the page can be traced to the document)."""
    data = {
        **dry_run["data"],
        "dry_run": False,
        "settings": {**dry_run["data"]["settings"], "rounds": gpu.MIN_ROUNDS},
        "device": {"name": "NVIDIA X", "capability": "9.0", "count": 1, "driver": "580.1",
                   "runtime": "13.0"},
    }  # fmt: skip
    document = {**dry_run, "data": data}
    gpu_report.check_real_run(document, "exchange-cuda.json")
    section = gpu_report.render_gpu_section(document)
    assert section.startswith("*exchange on CUDA tensors*: ")
    assert gpu_report.NOT_MEASURED not in section
    assert "NVIDIA X (compute capability 9.0, 1 device(s)), driver 580.1, CUDA 13.0" in section
    readme = gpu_report.render_readme_costs(document)
    own = data["providers"][gpu.TORCH_OWN]
    expected = f"{own['from_py_object']['median']:,.0f} ns / {own['allocator']['median']:,.0f} ns"
    assert f"| **defer**: torch's own table | {expected} |" in readme
    assert "NVIDIA X, driver 580.1" in readme


def test_the_committed_pages_show_the_committed_gpu_result() -> None:
    """docs/benchmarks.md's GPU section and README's GPU costs are what the committed
    ``exchange-cuda.json`` renders to: "not measured yet" and no README figures without one.
    (``python -m benchmarks --device cuda --readme-only`` rewrites them.)"""
    document = json.loads(COMMITTED.read_text()) if COMMITTED.is_file() else None
    if document is not None:
        gpu_report.check_real_run(document, str(COMMITTED))
    page = (ROOT / "docs" / "benchmarks.md").read_text()
    assert gpu_report.render_gpu_section(document) in page
    readme = (ROOT / "README.md").read_text()
    assert gpu_report.render_readme_costs(document) in readme
    if document is None:
        assert gpu_report.NOT_MEASURED in page
