"""The C timing harness against a producer written in Python (the ctypes mirrors of
DLPack), so every count and error path is observable; then one quick run on torch's own
table. Compiling the harness takes well under a second (no torch headers)."""

from __future__ import annotations

import ctypes
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from benchmarks.exchange_worker import PYTHON_LOOPS
from benchmarks.harness import FUNCTIONS, build_harness
from tests.exchange_suite import dlpack_ctypes as dl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def harness(tmp_path_factory: pytest.TempPathFactory) -> ctypes.PyDLL:
    library = build_harness(Path(sys.executable), tmp_path_factory.mktemp("harness"))
    dll = ctypes.PyDLL(str(library))
    for name in FUNCTIONS:
        function = getattr(dll, f"tcde_bench_{name}")
        function.restype = ctypes.c_int64
        function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_int64]
    return dll


class FakeProducer:
    """A DLPackExchangeAPI whose functions count their calls and check their arguments."""

    def __init__(self, *, major: int = 1, with_dltensor: bool = True) -> None:
        self.calls: dict[str, int] = {}
        self.deleted = 0
        self.seen: list[object] = []
        self.fail_in: str | None = None
        self.shape = (ctypes.c_int64 * 1)(3)
        self._managed: list[dl.DLManagedTensorVersioned] = []
        self._deleter = dl.DELETER(self._delete)
        self.api = dl.DLPackExchangeAPI()
        self.api.header.version.major = major
        self.api.header.version.minor = 3
        self.api.managed_tensor_allocator = dl.ALLOCATOR(self._allocate)
        self.api.managed_tensor_from_py_object_no_sync = dl.FROM_PY_OBJECT(self._from_py)
        self.api.managed_tensor_to_py_object_no_sync = dl.TO_PY_OBJECT(self._to_py)
        if with_dltensor:
            self.api.dltensor_from_py_object_no_sync = dl.DLTENSOR_FROM_PY_OBJECT(self._view)
        self.api.current_work_stream = dl.CURRENT_WORK_STREAM(self._stream)

    @property
    def address(self) -> int:
        return ctypes.addressof(self.api)

    def _count(self, name: str) -> bool:
        """Count the call; False when this function is set to fail.

        A Python callback cannot leave a Python exception set for its C caller (ctypes
        reports it as unraisable instead), so a failing fake returns -1 with no exception,
        which the harness must turn into an error of its own.
        """
        self.calls[name] = self.calls.get(name, 0) + 1
        return self.fail_in != name

    def _delete(self, managed: Any) -> None:
        self.deleted += 1

    def _new_managed(self) -> Any:
        managed = dl.DLManagedTensorVersioned()
        managed.deleter = self._deleter
        managed.dl_tensor.ndim = 1
        managed.dl_tensor.shape = self.shape
        self._managed.append(managed)
        return ctypes.pointer(managed)

    def _allocate(self, prototype: Any, out: Any, ctx: Any, set_error: Any) -> int:
        if not self._count("allocator"):
            return -1
        assert prototype.contents.ndim == 1
        assert prototype.contents.shape[0] == 16
        assert prototype.contents.dtype.code == dl.DLDataTypeCode.kDLFloat
        out[0] = self._new_managed()
        return 0

    def _from_py(self, obj: object, out: Any) -> int:
        if not self._count("from_py_object"):
            return -1
        self.seen.append(obj)
        out[0] = self._new_managed()
        return 0

    def _to_py(self, managed: Any, out: Any) -> int:
        if not self._count("to_py_object"):
            return -1
        # A real producer wraps the tensor; the harness must release the new reference.
        result = ["converted"]
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(result))
        out[0] = id(result)
        managed.contents.deleter(managed)
        return 0

    def _view(self, obj: object, out: Any) -> int:
        if not self._count("dltensor_from_py_object"):
            return -1
        self.seen.append(obj)
        out.contents.ndim = 1
        return 0

    def _stream(self, device_type: int, device_id: int, out: Any) -> int:
        if not self._count("current_work_stream"):
            return -1
        assert (device_type, device_id) == (dl.DLDeviceType.kDLCPU, 0)
        out[0] = None
        return 0


def test_each_loop_makes_exactly_the_requested_calls(harness: ctypes.PyDLL) -> None:
    producer = FakeProducer()
    tensors = ["a", "b", "c"]
    for name in ("from_py_object", "dltensor_from_py_object", "allocator", "current_work_stream"):
        elapsed = getattr(harness, f"tcde_bench_{name}")(producer.address, tensors, 7)
        assert elapsed > 0
        assert producer.calls[name] == 7
    # Cycling over the list: a, b, c, a, ... for both object-taking functions.
    assert producer.seen[:7] == ["a", "b", "c", "a", "b", "c", "a"]
    # Every managed tensor made by from_py_object and the allocator was released.
    assert producer.deleted == 14


def test_to_py_object_feeds_managed_tensors_in_batches(harness: ctypes.PyDLL) -> None:
    producer = FakeProducer()
    # More than one batch of 256, so the untimed refill between batches is exercised.
    elapsed = harness.tcde_bench_to_py_object(producer.address, ["t"], 600)
    assert elapsed > 0
    assert producer.calls["from_py_object"] == 600
    assert producer.calls["to_py_object"] == 600
    assert producer.deleted == 600


def test_round_trip_exports_imports_and_releases_each_tensor(harness: ctypes.PyDLL) -> None:
    producer = FakeProducer()
    elapsed = harness.tcde_bench_round_trip(producer.address, ["a", "b"], 5)
    assert elapsed > 0
    assert producer.calls["from_py_object"] == 5
    assert producer.calls["to_py_object"] == 5
    assert producer.seen == ["a", "b", "a", "b", "a"]
    assert producer.deleted == 5


def test_round_trip_failure_releases_the_export(harness: ctypes.PyDLL) -> None:
    producer = FakeProducer()
    producer.fail_in = "to_py_object"
    with pytest.raises(RuntimeError, match="to_py_object_no_sync failed"):
        harness.tcde_bench_round_trip(producer.address, ["t"], 3)
    # The refused managed tensor is still the harness's: it was released, once.
    assert producer.deleted == 1


def test_a_failing_producer_stops_the_loop_with_an_error(harness: ctypes.PyDLL) -> None:
    producer = FakeProducer()
    producer.fail_in = "from_py_object"
    with pytest.raises(RuntimeError, match="from_py_object_no_sync failed"):
        harness.tcde_bench_from_py_object(producer.address, ["t"], 10)
    assert producer.calls["from_py_object"] == 1


def test_to_py_object_failure_releases_the_rest_of_the_batch(harness: ctypes.PyDLL) -> None:
    producer = FakeProducer()
    producer.fail_in = "to_py_object"
    with pytest.raises(RuntimeError, match="to_py_object_no_sync failed"):
        harness.tcde_bench_to_py_object(producer.address, ["t"], 5)
    # A failed import leaves ownership with the caller: all five are the harness's to release.
    assert producer.calls["to_py_object"] == 1
    assert producer.deleted == 5


def test_missing_dltensor_function_is_reported_as_unsupported(harness: ctypes.PyDLL) -> None:
    producer = FakeProducer(with_dltensor=False)
    with pytest.raises(NotImplementedError, match="dltensor_from_py_object_no_sync NULL"):
        harness.tcde_bench_dltensor_from_py_object(producer.address, ["t"], 1)


@pytest.mark.parametrize(
    ("arguments", "error", "message"),
    [
        ((None, ["t"], 1), ValueError, "NULL"),
        (("producer", [], 1), TypeError, "non-empty list"),
        (("producer", ("t",), 1), TypeError, "non-empty list"),
        (("producer", ["t"], 0), ValueError, "calls must be positive"),
    ],
)
def test_bad_arguments_are_refused(
    harness: ctypes.PyDLL,
    arguments: tuple[str | None, object, int],
    error: type[Exception],
    message: str,
) -> None:
    producer = FakeProducer()
    address, tensors, calls = arguments
    pointer = producer.address if address == "producer" else None
    with pytest.raises(error, match=message):
        harness.tcde_bench_current_work_stream(pointer, tensors, calls)
    assert producer.calls == {}


def test_a_table_of_another_dlpack_major_is_refused(harness: ctypes.PyDLL) -> None:
    producer = FakeProducer(major=2)
    with pytest.raises(ValueError, match="major version 2"):
        harness.tcde_bench_from_py_object(producer.address, ["t"], 1)
    assert producer.calls == {}


@pytest.fixture
def worker_config(tmp_path: Path, harness: ctypes.PyDLL) -> Path:
    config = {
        "harness": harness._name,
        "calls": 2_000,
        "repeats": 3,
        "warmup": 200,
        "python_calls": 400,
        "chunks": 2,
        "providers": [{"name": "torch", "kind": "capsule"}],
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_served_worker_answers_repeats_one_at_a_time(worker_config: Path) -> None:
    """``--serve``: ready, then one repeat per request (providers rotated, the Python path
    timed in the same repeat), then the rest."""
    proc = subprocess.Popen(
        [sys.executable, "-W", "ignore", "-m", "benchmarks.exchange_worker", str(worker_config),
         "--serve"],
        cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)])},
    )  # fmt: skip
    requests = [{"op": "repeat", "index": 0}, {"op": "repeat", "index": 1}, {"op": "finish"}]
    stdout, stderr = proc.communicate("".join(json.dumps(r) + "\n" for r in requests), timeout=300)
    assert proc.returncode == 0, stderr
    replies = [json.loads(line) for line in stdout.splitlines()]
    assert replies[0] == {"op": "ready"}
    assert len(replies) == 4
    for reply in replies[1:3]:
        providers = reply["repeat"]["providers"]
        assert set(providers) == {"torch"}
        assert set(providers["torch"]) == set(FUNCTIONS)
        assert all(value > 0 for value in providers["torch"].values())
        # torch 2.13 takes every form, max_version included.
        assert set(reply["repeat"]["python_path"]) == set(PYTHON_LOOPS)
        assert all(value > 0 for value in reply["repeat"]["python_path"].values())
    assert replies[3]["errors"] == {}
    assert replies[3]["python_unsupported"] == {}


def test_worker_times_torchs_own_table(worker_config: Path) -> None:
    """One quick end-to-end run of the worker on the running torch (2.13 in `nox -s tests`)."""
    proc = subprocess.run(
        [sys.executable, "-W", "ignore", "-m", "benchmarks.exchange_worker", str(worker_config)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "python"), str(ROOT)])},
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["errors"] == {}
    samples = result["samples"]["torch"]
    assert set(samples) == set(FUNCTIONS)
    for name, values in samples.items():
        assert len(values) == 3, name
        assert all(value > 0 for value in values), name
    # An owning export cannot be cheaper than the empty loop around it.
    assert min(samples["from_py_object"]) > min(samples["loop_overhead"])
    assert set(result["python_path"]) == set(PYTHON_LOOPS)
    # One sample per repeat: a C call's ratio to its Python equivalent pairs them.
    assert all(len(values) == 3 for values in result["python_path"].values())


@pytest.mark.parametrize(
    "name", [name for name in PYTHON_LOOPS if name not in ("to_dlpack()", "from_dlpack(capsule)")]
)
def test_each_python_loop_runs_the_call_its_name_says(name: str) -> None:
    """The allocator's anchor once ran ``to_dlpack(torch.empty((16,), dtype=f32,
    device=cpu))`` under the name ``to_dlpack(torch.empty(16))``."""
    statement, _ = PYTHON_LOOPS[name]
    loop, call = statement.split(": ", 1)
    assert loop == "for t in ts"
    assert call in (name, f"t.{name}")


def test_a_keyword_this_torch_refuses_leaves_its_loop_out() -> None:
    import torch
    from benchmarks.exchange_worker import _PythonPath

    class Before29(torch.Tensor):
        """``Tensor.__dlpack__`` as torch 2.8 has it: no ``max_version``."""

        def __dlpack__(self, stream: object = None) -> object:  # type: ignore[override]
            return super().__dlpack__(stream=stream)

    path = _PythonPath(torch, [torch.zeros(4).as_subclass(Before29)], 8)
    assert set(path.unsupported) == {"__dlpack__(max_version=(1, 0))"}
    assert "max_version" in path.unsupported["__dlpack__(max_version=(1, 0))"]
    timed = path.chunk()
    assert set(timed) == set(PYTHON_LOOPS) - {"__dlpack__(max_version=(1, 0))"}
    assert all(value > 0 for value in timed.values())


def test_a_repeat_alternates_c_calls_and_the_python_path_part_by_part(
    worker_config: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each part times the C functions and the Python loops moments apart, the loops first
    in every other part, so both sides of a ratio see the same load; the repeat's figure
    is the mean over its parts."""
    from benchmarks.exchange_worker import Session

    config = json.loads(worker_config.read_text())
    session = Session({**config, "chunks": 4, "calls": 400})
    assert session.python_path is not None
    order: list[str] = []
    c_values = iter([10.0, 20.0, 30.0, 40.0])
    py_values = iter([1.0, 2.0, 3.0, 4.0])

    def providers(index: int, calls: int) -> dict[str, dict[str, float]]:
        assert calls == 100  # 400 calls in 4 parts
        order.append("C")
        return {"torch": {"allocator": next(c_values)}}

    def python() -> dict[str, float]:
        order.append("Python")
        return {"to_dlpack(torch.empty(16))": next(py_values)}

    monkeypatch.setattr(session, "_time_providers", providers)
    monkeypatch.setattr(session.python_path, "chunk", python)
    repeat = session.repeat(1)
    assert order == ["C", "Python", "Python", "C", "C", "Python", "Python", "C"]
    assert repeat["providers"]["torch"]["allocator"] == pytest.approx(25.0)
    assert repeat["python_path"]["to_dlpack(torch.empty(16))"] == pytest.approx(2.5)
