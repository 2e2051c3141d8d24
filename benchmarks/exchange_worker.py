"""Exchange-overhead measurements inside one torch environment.

Run as ``python -m benchmarks.exchange_worker CONFIG.json`` by the interpreter of the
environment under test (the bench's own, or an old-torch environment). It needs only the
standard library, torch and the repository's ctypes mirrors of DLPack
(``tests/exchange_suite/dlpack_ctypes.py``, found through ``PYTHONPATH``). It prints one
JSON document of raw per-call samples in nanoseconds; the parent summarizes them.

Config keys: ``harness`` (path of the compiled harness), ``calls``, ``repeats``,
``warmup``, ``providers`` (a list of ``{"name", "kind": "capsule" | "library", "path"}``),
``python_calls`` (0 skips the Python-path loops), ``chunks`` (the parts a repeat is timed
in, alternating C and Python; default 1). ``calls`` and ``python_calls`` are per repeat.

Each repeat times the harness functions of every provider and the Python-path loops
(:data:`PYTHON_LOOPS`), in one process, so that a ratio of a C call to its Python
equivalent can be taken repeat by repeat. With ``--serve`` it answers requests on stdin
instead, one repeat at a time (see :func:`serve`): the parent interleaves the repeats of
the workers of several torch environments, so that every comparison sees the same
moments of a shared machine's load.
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


#: The Python-level calls a consumer makes without the C API, each named by what it
#: calls: ``name -> (statement, setup)``, run by timeit over the worker's tensors. The
#: bare calls are the comparison's anchors; the keyword forms are what a consumer may pass
#: as well (``max_version`` asks for a versioned capsule, from torch 2.9; a torch that
#: refuses a form leaves it out).
PYTHON_LOOPS: dict[str, tuple[str, str]] = {
    "__dlpack__()": ("for t in ts: t.__dlpack__()", "pass"),
    "__dlpack__(max_version=(1, 0))": ("for t in ts: t.__dlpack__(max_version=(1, 0))", "pass"),
    "to_dlpack()": ("for t in ts: to_dlpack(t)", "pass"),
    # Fresh capsules each round: a capsule can be consumed only once.
    "from_dlpack(capsule)": (
        "for c in next(rounds): from_dlpack(c)",
        "rounds = iter([[t.__dlpack__() for t in ts] for _ in range(PER_ROUND)])",
    ),
    "torch.empty(16)": ("for t in ts: torch.empty(16)", "pass"),
    # What a consumer without the allocator does for a new tensor of its own.
    "to_dlpack(torch.empty(16))": ("for t in ts: to_dlpack(torch.empty(16))", "pass"),
    "to_dlpack(torch.empty((16,), dtype=f32, device=cpu))": (
        "for t in ts: to_dlpack(torch.empty((16,), dtype=f32, device=cpu))",
        "f32, cpu = torch.float32, torch.device('cpu')",
    ),
}


class _PythonPath:
    """The :data:`PYTHON_LOOPS` this torch accepts, warmed up, timed one chunk of
    ``calls`` calls (rounded down to whole rounds over the tensors) at a time."""

    def __init__(self, torch: Any, tensors: list[Any], calls: int) -> None:
        from torch.utils import dlpack

        self.per_round = max(1, calls // len(tensors))
        self.calls = self.per_round * len(tensors)
        env: dict[str, Any] = {
            "ts": tensors,
            "to_dlpack": dlpack.to_dlpack,
            "from_dlpack": dlpack.from_dlpack,
            "torch": torch,
            "PER_ROUND": self.per_round,
        }
        self.timers: dict[str, timeit.Timer] = {}
        self.unsupported: dict[str, str] = {}
        for name, (stmt, setup) in PYTHON_LOOPS.items():
            timer = timeit.Timer(stmt, setup=setup, globals=env)
            try:
                timer.timeit(number=max(1, self.per_round // 10))
            except TypeError as exc:  # a keyword this torch does not take
                self.unsupported[name] = f"{type(exc).__name__}: {exc}"
                continue
            self.timers[name] = timer

    def chunk(self) -> dict[str, float]:
        """ns per call of every loop, timed once."""
        return {
            name: timer.timeit(number=self.per_round) * 1e9 / self.calls
            for name, timer in self.timers.items()
        }


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
        self.chunks = max(1, int(config.get("chunks", 1)))
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
        self.python_path = (
            _PythonPath(torch, self.tensors, self.python_calls // self.chunks)
            if self.python_calls > 0
            else None
        )

    def _time_providers(self, index: int, calls: int) -> dict[str, dict[str, float]]:
        names = list(self.apis)
        shift = index % len(names) if names else 0
        order = names[shift:] + names[:shift]
        result: dict[str, dict[str, float]] = {name: {} for name in names}
        for function_name, function in self.functions.items():
            for name in order:
                if function_name in self.unsupported[name]:
                    continue
                elapsed = function(self.apis[name], self.tensors, calls)
                result[name][function_name] = elapsed / calls
        return result

    def repeat(self, index: int) -> dict[str, Any]:
        """One repeat, in ``chunks`` parts: each part times every function for every
        provider in turn (the providers' order rotated by ``index``, so that none always
        runs first or right after another) and the Python-path loops, the loops first in
        every other part. So a C call and its Python equivalent are timed moments apart,
        many times over, and a load spike on a shared machine falls on both. Returns ns per
        call, averaged over the parts: ``{"providers": {provider: {function: ns}},
        "python_path": {loop: ns}}``."""
        calls = max(1, self.calls // self.chunks)
        providers: dict[str, dict[str, float]] = {name: {} for name in self.apis}
        python: dict[str, float] = {}

        def add(total: dict[str, float], part: dict[str, float]) -> None:
            for key, value in part.items():
                total[key] = total.get(key, 0.0) + value / self.chunks

        for part in range(self.chunks):
            python_first = (index + part) % 2 == 0
            if self.python_path is not None and python_first:
                add(python, self.python_path.chunk())
            for name, functions in self._time_providers(index, calls).items():
                add(providers[name], functions)
            if self.python_path is not None and not python_first:
                add(python, self.python_path.chunk())
        return {"providers": providers, "python_path": python}

    def metadata(self) -> dict[str, Any]:
        """Everything but the samples."""
        return {
            "torch": str(self.torch.__version__),
            "python": sys.version.split()[0],
            "tensors": [f"{tuple(t.shape)} {t.dtype}" for t in self.tensors],
            "unsupported": self.unsupported,
            "python_unsupported": {} if self.python_path is None else self.python_path.unsupported,
            "errors": self.errors,
        }


def add_repeat(samples: dict[str, Any], repeat: dict[str, Any]) -> None:
    """Append one :meth:`Session.repeat` to ``samples``, a worker's output in the making:
    ``{"samples": {provider: {function: [ns, ...]}}, "python_path": {loop: [ns, ...]}}``."""
    for name, functions in repeat["providers"].items():
        per_provider = samples.setdefault("samples", {}).setdefault(name, {})
        for function, value in functions.items():
            per_provider.setdefault(function, []).append(value)
    for loop, value in repeat["python_path"].items():
        samples.setdefault("python_path", {}).setdefault(loop, []).append(value)


def measure(config: dict[str, Any]) -> dict[str, Any]:
    """Run every harness function for every provider, and the Python-path loops; repeats
    interleave them so that a load spike on the shared machine hits all of them alike."""
    session = Session(config)
    samples: dict[str, Any] = {"samples": {name: {} for name in session.apis}, "python_path": {}}
    for index in range(session.repeats):
        add_repeat(samples, session.repeat(index))
    return {**samples, **session.metadata()}


def serve(config: dict[str, Any], requests: IO[str], replies: IO[str]) -> None:
    """Answer one JSON request per line, so that a parent can interleave the repeats of
    several workers (other torch environments) in one run: ``{"op": "ready"}`` is sent
    once set up; ``{"op": "repeat", "index": i}`` is answered with ``{"repeat": ...}``
    (one :meth:`Session.repeat`, for :func:`add_repeat`), ``{"op": "finish"}`` with
    :meth:`Session.metadata`, after which the worker exits."""
    session = Session(config)

    def reply(document: dict[str, Any]) -> None:
        replies.write(json.dumps(document) + "\n")
        replies.flush()

    reply({"op": "ready"})
    for line in requests:
        request = json.loads(line)
        if request["op"] == "repeat":
            reply({"repeat": session.repeat(int(request["index"]))})
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
