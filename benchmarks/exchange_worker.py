"""Exchange-overhead measurements inside one torch environment.

Run as ``python -m benchmarks.exchange_worker CONFIG.json`` by the interpreter of the
environment under test (the bench's own, or an old-torch environment). It needs only the
standard library, torch and the repository's ctypes mirrors of DLPack
(``tests/exchange_suite/dlpack_ctypes.py``, found through ``PYTHONPATH``). It prints one
JSON document of raw per-call samples in nanoseconds; the parent summarizes them.

Config keys: ``harness`` (path of the compiled harness), ``calls``, ``repeats``,
``warmup``, ``providers`` (a list of ``{"name", "kind": "capsule" | "library", "path"}``),
``python_calls`` (0 skips the Python-path loops).

With ``--serve`` it answers requests on stdin instead, one repeat at a time (see
:func:`serve`): the parent interleaves the repeats of the torch 2.13 and the torch 2.8
workers, so that both comparisons see the same moments of a shared machine's load.
"""

from __future__ import annotations

import ctypes
import json
import sys
import timeit
from collections.abc import Callable
from typing import IO, Any

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
        # What a consumer without the allocator does for a new tensor of its own.
        "to_dlpack(torch.empty(16))": (
            "for t in ts: to_dlpack(torch.empty((16,), dtype=f32, device=cpu))",
            "f32, cpu = torch.float32, torch.device('cpu')",
        ),
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


class Session:
    """The harness, the providers' tables and the tensors of one worker, warmed up."""

    def __init__(self, config: dict[str, Any]) -> None:
        import torch

        self.torch = torch
        self.harness = ctypes.PyDLL(config["harness"])
        self.calls = int(config["calls"])
        self.tensors = _tensors(torch)
        self.python_calls = int(config.get("python_calls", 0))
        self.repeats = int(config["repeats"])
        self._keep: list[Any] = []
        self.functions: dict[str, Callable[..., int]] = {}
        for name in HARNESS_FUNCTIONS:
            function = getattr(self.harness, f"tcde_bench_{name}")
            function.restype = ctypes.c_int64
            function.argtypes = [ctypes.c_void_p, ctypes.py_object, ctypes.c_int64]
            self.functions[name] = function
        self.apis: dict[str, int] = {}
        self.errors: dict[str, str] = {}
        for provider in config["providers"]:
            resolved = _resolve_api(torch, provider, self._keep)
            if isinstance(resolved, str):
                self.errors[provider["name"]] = resolved
            else:
                self.apis[provider["name"]] = resolved
        self.unsupported: dict[str, dict[str, str]] = {name: {} for name in self.apis}
        warmup = int(config["warmup"])
        for name, api in self.apis.items():
            for function_name, function in self.functions.items():
                problem = _warm_up(function, api, self.tensors, warmup)
                if problem is not None:
                    self.unsupported[name][function_name] = problem

    def repeat(self, index: int) -> dict[str, dict[str, float]]:
        """One repeat: every function, each timed for every provider in turn, the providers'
        order rotated by ``index`` so that none always runs first (or right after another);
        returns ns per call by provider and function."""
        names = list(self.apis)
        shift = index % len(names) if names else 0
        order = names[shift:] + names[:shift]
        result: dict[str, dict[str, float]] = {name: {} for name in names}
        for function_name, function in self.functions.items():
            for name in order:
                if function_name in self.unsupported[name]:
                    continue
                elapsed = function(self.apis[name], self.tensors, self.calls)
                result[name][function_name] = elapsed / self.calls
        return result

    def metadata(self) -> dict[str, Any]:
        """Everything but the samples; the Python-path loops run here (untimed by rounds)."""
        torch = self.torch
        return {
            "torch": str(torch.__version__),
            "python": sys.version.split()[0],
            "tensors": [f"{tuple(t.shape)} {t.dtype}" for t in self.tensors],
            "unsupported": self.unsupported,
            "errors": self.errors,
            "python_path": (
                _python_path(torch, self.tensors, self.python_calls, self.repeats)
                if self.python_calls > 0
                else {}
            ),
        }


def measure(config: dict[str, Any]) -> dict[str, Any]:
    """Run every harness function for every provider; repeats interleave the providers so
    that a load spike on the shared machine hits all of them alike."""
    session = Session(config)
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in session.apis}
    for index in range(session.repeats):
        for name, functions in session.repeat(index).items():
            for function_name, value in functions.items():
                samples[name].setdefault(function_name, []).append(value)
    return {"samples": samples, **session.metadata()}


def serve(config: dict[str, Any], requests: IO[str], replies: IO[str]) -> None:
    """Answer one JSON request per line, so that a parent can interleave the repeats of
    several workers (other torch environments) in one run: ``{"op": "ready"}`` is sent
    once set up; ``{"op": "repeat", "index": i}`` is answered with ``{"samples": ...}``
    (one :meth:`Session.repeat`), ``{"op": "finish"}`` with :meth:`Session.metadata`,
    after which the worker exits."""
    session = Session(config)

    def reply(document: dict[str, Any]) -> None:
        replies.write(json.dumps(document) + "\n")
        replies.flush()

    reply({"op": "ready"})
    for line in requests:
        request = json.loads(line)
        if request["op"] == "repeat":
            reply({"samples": session.repeat(int(request["index"]))})
        elif request["op"] == "finish":
            reply(session.metadata())
            return
        else:
            raise ValueError(f"unknown request {request!r}")


def main(argv: list[str]) -> int:
    if len(argv) not in (1, 2) or (len(argv) == 2 and argv[1] != "--serve"):
        print("usage: python -m benchmarks.exchange_worker CONFIG.json [--serve]", file=sys.stderr)
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        config = json.load(handle)
    if len(argv) == 2:
        serve(config, sys.stdin, sys.stdout)
        return 0
    json.dump(measure(config), sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
