"""``--baseline DIR`` in the exchange and portable benchmarks: the baseline checkout's own
driver builds its own csrc/, its libraries join the same interleaved repeats as extra
providers, and the records carry this tree / the baseline's per member. The builds and the
timing are replaced here (no torch, no compiler); the baseline's driver is a stub in a
made-up checkout, run the way a real one is."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from benchmarks import exchange, portable
from benchmarks.exchange import BASELINE, BASELINE_LIMIT
from benchmarks.exchange_worker import HARNESS_FUNCTIONS
from benchmarks.portable import BASELINE_BUILD, PYTHON_ALLOCATION, PYTHON_EXPORT, SHIPPED
from benchmarks.subjects import BenchContext, OldTorchEnv, build_baseline_library

from _torch_c_dlpack_ext_core.errors import ConfigError

#: A baseline checkout's driver that builds nothing: it records what it was asked.
STUB_REQUESTS = """
import dataclasses

@dataclasses.dataclass
class BuildRequest:
    torch: object
    backend: str
    output_dir: object
    python_include: object
    source_dir: object

@dataclasses.dataclass
class PortableRequest:
    python: str
    output_dir: object
    python_include: object
    source_dir: object

@dataclasses.dataclass
class BuildPolicy:
    stable_abi_audit: object = None
"""
STUB_DRIVER = """
import dataclasses, json, types

def _record(kind, request, **extra):
    fields = {k: str(v) for k, v in dataclasses.asdict(request).items()}
    (request.output_dir / "request.json").write_text(json.dumps({"kind": kind, **fields, **extra}))
    return types.SimpleNamespace(file=f"lib-baseline-{kind}.so")

def compile_library(request):
    return _record("native", request)

def compile_portable_library(request, policy):
    return _record("portable", request, stable_abi_audit=policy.stable_abi_audit)
"""


def _checkout(root: Path) -> Path:
    core = root / "python" / "_torch_c_dlpack_ext_core"
    core.mkdir(parents=True)
    (core / "__init__.py").write_text("")
    (core / "buildrequest.py").write_text(textwrap.dedent(STUB_REQUESTS))
    (core / "driver.py").write_text(textwrap.dedent(STUB_DRIVER))
    (root / "csrc").mkdir()
    return root


def _ctx(tmp_path: Path, baseline: Path | None) -> BenchContext:
    return BenchContext(
        quick=True,
        full=False,
        work_dir=tmp_path / "work",
        results_dir=tmp_path / "results",
        progress=lambda message: None,
        baseline=baseline,
    )


@pytest.mark.parametrize("native", [True, False], ids=["native", "portable"])
def test_the_baseline_is_built_by_its_own_driver_from_its_own_csrc(
    tmp_path: Path, native: bool
) -> None:
    baseline = _checkout(tmp_path / "before")
    output = tmp_path / "out"
    library = build_baseline_library(
        baseline,
        output,
        python=Path(sys.executable),
        torch_dir=tmp_path / "torch" if native else None,
    )
    kind = "native" if native else "portable"
    assert library == output.resolve() / f"lib-baseline-{kind}.so"
    request = json.loads((output / "request.json").read_text())
    assert request["kind"] == kind
    assert request["source_dir"] == str((baseline / "csrc").resolve())
    assert Path(request["python_include"], "Python.h").is_file()
    if native:
        assert (request["torch"], request["backend"]) == (str(tmp_path / "torch"), "cpu")
    else:
        assert (request["python"], request["stable_abi_audit"]) == ("abi3", None)


def test_a_folder_that_is_no_checkout_is_refused(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"--baseline .*no python/_torch_c_dlpack_ext_core or csrc"
    ):
        build_baseline_library(tmp_path, tmp_path / "out", python=Path(sys.executable))


def _worker_output(samples: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    python = {
        loop: [1000.0, 1000.0, 1000.0]
        for loops in exchange.PYTHON_EQUIVALENTS.values()
        for loop in loops
    }
    return {
        "samples": samples,
        "python_path": python,
        "torch": "2.13.0+cpu",
        "python": "3.12.1",
        "tensors": [],
    }


def _exchange_samples(providers: list[str]) -> dict[str, dict[str, list[float]]]:
    """Three repeats; the load hits repeat 1 of every provider alike. This tree's export
    costs 1.1x the baseline's in each repeat, the rest the same."""
    base = [100.0, 300.0, 100.0]
    samples = {name: {fn: list(base) for fn in HARNESS_FUNCTIONS} for name in providers}
    if "ours" in samples and BASELINE in samples:
        samples["ours"]["from_py_object"] = [110.0, 330.0, 110.0]
    return samples


def _fake_exchange(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[Any]:
    """Replace exchange's builds and timing; the comparisons it was asked to time."""
    asked: list[Any] = []
    monkeypatch.setattr(exchange, "build_harness", lambda python, out: tmp_path / "harness.so")
    monkeypatch.setattr(
        exchange,
        "build_our_library",
        lambda torch_dir, out, python: type("Built", (), {"path": out / "ours.so"})(),
    )
    monkeypatch.setattr(
        exchange,
        "build_baseline_library",
        lambda baseline, out, *, python, torch_dir: out / "baseline.so",
    )
    monkeypatch.setattr(exchange, "running_torch_dir", lambda: tmp_path / "torch213")
    monkeypatch.setattr(
        exchange,
        "old_torch_env",
        lambda version: OldTorchEnv(
            python=Path(sys.executable), torch_dir=tmp_path / "torch28", version="2.8.0"
        ),
    )
    legacy = type(
        "Legacy", (), {"version": "0.1.5", "library": lambda self, v: tmp_path / "legacy.so"}
    )()
    monkeypatch.setattr(exchange, "fetch_legacy_release", lambda work_dir: legacy)

    def run_interleaved(comparisons: list[Any], settings: Any, ctx: Any) -> dict[str, Any]:
        asked.extend(comparisons)
        return {
            c.key: _worker_output(_exchange_samples([p["name"] for p in c.providers]))
            for c in comparisons
        }

    monkeypatch.setattr(exchange, "run_interleaved", run_interleaved)
    return asked


def test_with_a_baseline_the_exchange_times_its_library_in_the_same_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked = _fake_exchange(monkeypatch, tmp_path)
    baseline = _checkout(tmp_path / "before")
    data, tables, targets = exchange.run_exchange(_ctx(tmp_path, baseline))
    # One interleaved run: each comparison times the baseline's library for its own torch.
    assert [c.key for c in asked] == ["current", "old"]
    for comparison in asked:
        paths = {p["name"]: p.get("path") for p in comparison.providers}
        assert paths[BASELINE] == str(
            tmp_path / "work" / "libs" / "baseline" / comparison.key / "baseline.so"
        )
    assert data["baseline"] == "before"  # no git checkout: its folder's name, never a path
    for key in ("current", "old"):
        ratios = data[key]["against_baseline"]
        # Per repeat 1.1, 1.1, 1.1: the load of repeat 1 cancels out.
        assert ratios["from_py_object"]["median"] == pytest.approx(1.1)
        assert ratios["allocator"]["median"] == pytest.approx(1.0)
        assert "loop_overhead" not in ratios
    titles = [t.title for t in tables]
    assert sum("vs the baseline tree's (before" in title for title in titles) == 2
    by_name = {t.description: t for t in targets}
    against = "ours on torch 2.13.0+cpu / the baseline tree's (median of repeats)"
    export = by_name[f"from_py_object: {against}"]
    assert (export.limit, export.status) == (BASELINE_LIMIT, "missed")
    assert by_name[f"dltensor_from_py_object: {against}"].status == "met"
    # The baseline tree is held to the targets against 0.1.5 too, beside this tree.
    assert any(
        t.description.startswith("from_py_object: the baseline tree / torch-c-dlpack-ext 0.1.5")
        for t in targets
    )


def test_without_a_baseline_the_exchange_records_keep_their_shape(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    asked = _fake_exchange(monkeypatch, tmp_path)
    data, tables, targets = exchange.run_exchange(_ctx(tmp_path, None))
    assert all(BASELINE not in {p["name"] for p in c.providers} for c in asked)
    assert "baseline" not in data
    assert "against_baseline" not in data["current"]
    assert not any("baseline" in t.description for t in targets)
    assert len(tables) == 4


def test_with_a_baseline_the_portable_benchmark_times_its_abi3_build(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(portable, "build_harness", lambda python, out: tmp_path / "harness.so")
    monkeypatch.setattr(
        portable, "build_portable", lambda out, *, python, target: out / f"{target}.so"
    )
    monkeypatch.setattr(
        portable, "build_baseline_library", lambda baseline, out, *, python: out / "baseline.so"
    )

    def no_cuda_torch() -> Any:
        raise ConfigError("no CPython 3.12 here")

    monkeypatch.setattr(portable, "cuda_torch_env", no_cuda_torch)
    asked: list[Any] = []

    def run_interleaved(comparisons: list[Any], settings: Any, ctx: Any, label: str) -> Any:
        asked.extend(comparisons)
        output = _worker_output(
            {
                name: {
                    "from_py_object": [300.0, 900.0, 300.0],
                    "dltensor_from_py_object": [200.0, 600.0, 200.0],
                    "allocator": [500.0, 1500.0, 500.0],
                }
                for name in (p["name"] for p in comparisons[0].providers)
            }
        )
        output["python_path"].update({PYTHON_EXPORT: [1000.0] * 3, PYTHON_ALLOCATION: [1000.0] * 3})
        output["samples"][SHIPPED]["from_py_object"] = [309.0, 927.0, 309.0]
        return {comparisons[0].key: output}

    monkeypatch.setattr(portable, "run_interleaved", run_interleaved)
    data, tables, targets = portable.run_portable(_ctx(tmp_path, _checkout(tmp_path / "before")))
    providers = {p["name"]: p["path"] for p in asked[0].providers}
    assert providers[BASELINE_BUILD].endswith("baseline/baseline.so")
    ratios = data["comparisons"][portable.TORCH213]["against_baseline"]
    assert ratios["from_py_object"]["median"] == pytest.approx(1.03)
    assert ratios["allocator"]["median"] == pytest.approx(1.0)
    baseline_rows = {row[0]: row for row in tables[-1].rows}
    assert baseline_rows["from_py_object"][3:5] == ("1.03x", "1.03x-1.03x")
    met = [t for t in targets if "baseline tree" in t.description]
    assert [t.status for t in met] == ["met", "met"]
    # The shipped build's own targets do not count the baseline's build.
    assert sum(BASELINE_BUILD in t.description for t in targets) == 0
