"""Exchange-overhead measurements inside one torch environment.

Run as ``python -m benchmarks.exchange_worker CONFIG.json`` by the interpreter of the
environment under test (the bench's own, or an old-torch environment). It needs only the
standard library, torch and the repository's ctypes mirrors of DLPack
(``tests/exchange_suite/dlpack_ctypes.py``, found through ``PYTHONPATH``). It prints one
JSON document of raw per-call samples in nanoseconds; the parent summarizes them.

Config keys: ``harness`` (path of the compiled harness), ``calls``, ``repeats``,
``warmup``, ``providers`` (a list of ``{"name", "kind": "capsule" | "library", "path"}``),
``python_calls`` (0 skips the Python-path loops).
"""

from __future__ import annotations

import ctypes
import json
import sys
import timeit
from collections.abc import Callable
from typing import Any

HARNESS_FUNCTIONS = (
    "from_py_object",
    "dltensor_from_py_object",
    "to_py_object",
    "round_trip",
    "allocator",
    "current_work_stream",
    "loop_overhead",
)


def _tensors(torch: Any) -> list[Any]:
    # Mixed ranks, dtypes and a non-contiguous view, so a producer cannot look good by
    # caching one shape; four distinct objects defeat per-object memoization.
    return [
        torch.zeros(1024, dtype=torch.float32),
        torch.zeros(32, 32, dtype=torch.float32).t(),
        torch.zeros(2, 3, 4, dtype=torch.int64),
        torch.zeros((), dtype=torch.float16),
    ]


def _capsule_api(torch: Any) -> int:
    from tests.exchange_suite.dlpack_ctypes import api_from_capsule

    capsule = getattr(torch.Tensor, "__dlpack_c_exchange_api__", None)
    if capsule is None:
        raise RuntimeError(
            f"torch {torch.__version__} has no torch.Tensor.__dlpack_c_exchange_api__"
        )
    address = ctypes.addressof(api_from_capsule(capsule))
    if not address:
        raise RuntimeError("the exchange API capsule holds a NULL pointer")
    return address


def _library_api(path: str, keep: list[Any]) -> int:
    # Loaded locally: the library only needs torch's libraries, which `import torch`
    # already mapped, and must not leak its symbols into other loads.
    library = ctypes.CDLL(path)
    keep.append(library)
    entry = library.TorchDLPackExchangeAPIPtr
    entry.restype = ctypes.c_int64
    entry.argtypes = []
    pointer = int(entry())
    if pointer == 0:
        raise RuntimeError(f"{path}: TorchDLPackExchangeAPIPtr returned NULL")
    return pointer


def _python_path(
    torch: Any, tensors: list[Any], calls: int, repeats: int
) -> dict[str, list[float]]:
    """Per-call nanoseconds of the Python-level equivalents, timed with timeit."""
    from torch.utils import dlpack

    per_round = max(1, calls // len(tensors))
    n = per_round * len(tensors)
    env: dict[str, Any] = {"ts": tensors, "to_dlpack": dlpack.to_dlpack, "torch": torch}
    loops: dict[str, tuple[str, str]] = {
        "__dlpack__()": ("for t in ts: t.__dlpack__()", "pass"),
        "to_dlpack()": ("for t in ts: to_dlpack(t)", "pass"),
        # Fresh capsules each round: a capsule can be consumed only once.
        "from_dlpack(capsule)": (
            "for c in next(rounds): from_dlpack(c)",
            "rounds = iter([[t.__dlpack__() for t in ts] for _ in range(PER_ROUND)])",
        ),
        "torch.empty(16)": ("for t in ts: torch.empty(16)", "pass"),
    }
    env["from_dlpack"] = dlpack.from_dlpack
    env["PER_ROUND"] = per_round
    results: dict[str, list[float]] = {}
    for name, (stmt, setup) in loops.items():
        timer = timeit.Timer(stmt, setup=setup, globals=env)
        timer.timeit(number=max(1, per_round // 10))
        results[name] = [timer.timeit(number=per_round) * 1e9 / n for _ in range(repeats)]
    return results


def _resolve_api(torch: Any, provider: dict[str, str], keep: list[Any]) -> int | str:
    """The provider's table address, or why it could not be had."""
    try:
        if provider["kind"] == "capsule":
            return _capsule_api(torch)
        return _library_api(provider["path"], keep)
    except (OSError, RuntimeError, AttributeError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _warm_up(function: Callable[..., int], api: int, tensors: list[Any], calls: int) -> str | None:
    """Run ``calls`` untimed calls; return why the function is unsupported, if it is."""
    try:
        function(api, tensors, calls)
    except NotImplementedError as exc:
        return str(exc)
    return None


def measure(config: dict[str, Any]) -> dict[str, Any]:
    """Run every harness function for every provider; repeats interleave the providers so
    that a load spike on the shared machine hits all of them alike."""
    import torch

    harness = ctypes.PyDLL(config["harness"])
    calls = int(config["calls"])
    repeats = int(config["repeats"])
    warmup = int(config["warmup"])
    tensors = _tensors(torch)
    keep: list[Any] = []

    functions: dict[str, Callable[..., int]] = {}
    for name in HARNESS_FUNCTIONS:
        function = getattr(harness, f"tcde_bench_{name}")
        function.restype = ctypes.c_int64
        function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_int64]
        functions[name] = function

    apis: dict[str, int] = {}
    errors: dict[str, str] = {}
    for provider in config["providers"]:
        resolved = _resolve_api(torch, provider, keep)
        if isinstance(resolved, str):
            errors[provider["name"]] = resolved
        else:
            apis[provider["name"]] = resolved

    samples: dict[str, dict[str, list[float]]] = {name: {} for name in apis}
    unsupported: dict[str, dict[str, str]] = {name: {} for name in apis}
    for name, api in apis.items():
        for function_name, function in functions.items():
            problem = _warm_up(function, api, tensors, warmup)
            if problem is not None:
                unsupported[name][function_name] = problem
    for _ in range(repeats):
        for name, api in apis.items():
            for function_name, function in functions.items():
                if function_name in unsupported[name]:
                    continue
                elapsed = function(api, tensors, calls)
                samples[name].setdefault(function_name, []).append(elapsed / calls)

    python_calls = int(config.get("python_calls", 0))
    return {
        "torch": str(torch.__version__),
        "python": sys.version.split()[0],
        "tensors": [f"{tuple(t.shape)} {t.dtype}" for t in tensors],
        "samples": samples,
        "unsupported": unsupported,
        "errors": errors,
        "python_path": (
            _python_path(torch, tensors, python_calls, repeats) if python_calls > 0 else {}
        ),
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m benchmarks.exchange_worker CONFIG.json", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        config = json.load(handle)
    json.dump(measure(config), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
