"""Import totality: whatever the installation, the environment or torch look like,
``import torch_c_dlpack_ext`` (and ``import tvm_ffi``) returns normally.

Hypothesis generates each case: a manifest's content (JSON of any type in any field,
other encodings, truncations, huge files, deep nesting, NUL bytes), the state of the
manifest and of the library file (missing, empty, truncated, unreadable, a directory, a
FIFO, a symlink inside or out of the package, swapped with each other), every
``TORCH_C_DLPACK_EXT_*`` variable with generated values (and generated unknown names),
and bogus torch attributes (a capsule that is ``5``, ``None``, a string, another name's
capsule or a raising descriptor; a legacy int of ``1``, ``2**64``, a heap address...; a
torch whose ``compiled_with_cxx11_abi`` raises or whose ``__version__`` is missing), each
case a quarter of the time under a warnings filter that makes every warning an error
(``python -W error``).

Each case runs in a subprocess, several per process: the worker imports torch once, then
for each case resets torch, the environment and ``sys.modules`` and imports the package
afresh from that case's directory. A crash (a signal) fails the batch and names the case.
The invariant, per case:

- the import raises nothing; the process exits 0 with no traceback;
- at most one ``TorchCDLPackExtWarning``, exactly one when nothing was published (except
  ``DISABLE`` and a valid torch API, which are quiet by design), short (a few lines, no
  sentence twice) and naming a real cause: never the import boundary's "selecting a
  library failed" unless the case injected a ``BaseException`` into torch;
- published means a valid ``dlpack_exchange_api`` capsule and the legacy int holding its
  pointer, from a library inside the case's package; not published means ``torch.Tensor``
  was left exactly as it was;
- never deferred to a bogus attribute, and a bogus attribute is named in the warning;
- with ``BACKEND=cuda``/``rocm`` no CPU library is ever published (issue 13);
- no CUDA call: spies on ``torch.cuda.is_available``, ``device_count``, ``init``,
  ``_lazy_init`` and ``torch._C._cuda_getDeviceCount``/``_cuda_init`` see nothing during the
  import (issue 18: the backend is the build flavour);
- under warnings-as-errors, the import either succeeds silently (published, deferred,
  disabled) or raises an ``ImportError`` subclass whose cause is the warning, leaving
  ``torch.Tensor`` as it was (issue 18: consumers guard with ``except ImportError``).

The same cases run once more, fewer of them, inside a real torch 2.8 environment with the
real apache-tvm-ffi (which lacks the API): ``import tvm_ffi`` must succeed and must not have
built its own addon (there is no compiler on ``PATH``, so it cannot, and it fails fast).

Sizes: the ``ci`` profile runs ``BATCHES`` batches of ``BATCH`` cases (fixed seed), plus the
table of single faults and ``TVM_CASES`` tvm-ffi processes; ``--hypothesis-profile=thorough``
runs many more. The terminal summary reports the number of cases.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.helpers import CUDA_SPY, Bundled, build_fake_library, clean_env, make_package, run_python

from _torch_c_dlpack_ext_core.naming import MANIFEST_NAME, PACKAGE, Backend
from torch_c_dlpack_ext._settings import BUILD_TIME_VARIABLES, RUNTIME_VARIABLES

from .conftest import count_case

torch = pytest.importorskip("torch")

P = "TORCH_C_DLPACK_EXT_"
TORCH_MINOR = ".".join(torch.__version__.split(".")[:2])
ABI = bool(torch.compiled_with_cxx11_abi())
IN_CI_PROFILE = settings.get_current_profile_name() == "ci"
#: Cases per worker process, and worker processes per run (``ci`` profile).
BATCH = 12
BATCHES = 20 if IN_CI_PROFILE else max(20, settings.default.max_examples // 10)
TVM_CASES = 6 if IN_CI_PROFILE else max(10, settings.default.max_examples // 50)

# --------------------------------------------------------------------------------------
# The worker: runs many cases in one interpreter, one JSON line per case.
# --------------------------------------------------------------------------------------

WORKER = (
    r"""
import ctypes, json, os, sys, warnings

MODE = sys.argv[2]  # "batch": many cases, re-importing the package; "tvm": one, via tvm_ffi
import torch

CAPSULE, LEGACY = "__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__"
PREFIX = "TORCH_C_DLPACK_EXT_"
MISSING = object()
T = torch.Tensor
ORIGINAL = {name: vars(T).get(name, MISSING) for name in (CAPSULE, LEGACY)}
ABI_QUERY, VERSION = torch.compiled_with_cxx11_abi, torch.__version__
"""
    + CUDA_SPY
    + r"""is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_IsValid", ctypes.pythonapi))
get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.py_object, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))
new_capsule = ctypes.PYFUNCTYPE(ctypes.py_object, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p)(("PyCapsule_New", ctypes.pythonapi))
NAME = b"dlpack_exchange_api"
OTHER_NAME = ctypes.create_string_buffer(b"other_api")
OWN_NAME = ctypes.create_string_buffer(NAME)  # a capsule keeps the pointer, not a copy
HEAP = ctypes.create_string_buffer(64)
OWN = ORIGINAL[CAPSULE]
OWN_POINTER = get_pointer(OWN, NAME) if OWN is not MISSING and is_valid(OWN, NAME) else None

class InjectedBaseException(BaseException):
    pass

class Raises:
    def __get__(self, instance, owner):
        raise RuntimeError("attribute descriptor raised")

def capsule_value(kind):
    return {
        "int5": lambda: 5, "none": lambda: None, "str": lambda: "dlpack_exchange_api",
        "object": object, "raises": Raises,
        "named_heap": lambda: new_capsule(
            ctypes.addressof(HEAP), ctypes.addressof(OWN_NAME), None),
        "other_name": lambda: new_capsule(
            ctypes.addressof(HEAP), ctypes.addressof(OTHER_NAME), None),
    }[kind]()

def legacy_value(kind):
    if isinstance(kind, int):
        return kind
    return {"true": lambda: True, "str": lambda: "0x1000", "float": lambda: 1.5,
            "heap": lambda: ctypes.addressof(HEAP), "own": lambda: OWN_POINTER}[kind]()

def raise_runtime():
    raise RuntimeError("torch's ABI query exploded")

def raise_base():
    raise InjectedBaseException("injected")

def reset():
    for name, value in ORIGINAL.items():
        if value is MISSING:
            if name in vars(T):
                delattr(T, name)
        else:
            setattr(T, name, value)
    torch.compiled_with_cxx11_abi, torch.__version__ = ABI_QUERY, VERSION
    for key in [k for k in os.environ if k.startswith(PREFIX)]:
        del os.environ[key]
    for name in [m for m in sys.modules if m.split(".")[0] == "torch_c_dlpack_ext"]:
        del sys.modules[name]

def apply(case):
    os.environ.update(case["env"])
    if case["capsule"] == "delete" or case["legacy"] != "absent":
        if CAPSULE in vars(T):
            delattr(T, CAPSULE)
    if case["capsule"] not in ("keep", "delete"):
        setattr(T, CAPSULE, capsule_value(case["capsule"]))
    if case["legacy"] != "absent":
        value = legacy_value(case["legacy"])
        if value is not None:
            setattr(T, LEGACY, value)
    if case["torch"] == "abi_raises":
        torch.compiled_with_cxx11_abi = raise_runtime
    elif case["torch"] == "abi_raises_base":
        torch.compiled_with_cxx11_abi = raise_base
    elif case["torch"] == "no_version":
        del torch.__version__
    elif case["torch"] == "version_float":
        torch.__version__ = 2.8

def state():
    out = {}
    for name in (CAPSULE, LEGACY):
        value = vars(T).get(name, MISSING)
        out[name] = value
    return out

def describe(value):
    if value is MISSING:
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return type(value).__name__

def run(case):
    before = state()
    base_path = list(sys.path)
    sys.path.insert(0, case["root"])
    raised, status, package, as_import_error, cause = None, None, None, False, None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("error" if case.get("werror") else "always")
        del CUDA_CALLS[:]
        try:
            if MODE == "tvm":
                import tvm_ffi
                pkg = sys.modules.get("torch_c_dlpack_ext")
                if pkg is None:
                    raise AssertionError("tvm_ffi did not import torch_c_dlpack_ext")
            else:
                import torch_c_dlpack_ext as pkg
            package = pkg.__file__
            status = pkg.status()
        except BaseException as exc:
            raised = f"{type(exc).__name__}: {exc}"[:2000]
            as_import_error = isinstance(exc, ImportError)
            cause = exc.__cause__
    calls = list(CUDA_CALLS) if MODE == "batch" else []  # tvm-ffi asks torch.cuda itself
    sys.path[:] = base_path
    after = state()
    capsule = after[CAPSULE]
    valid = capsule is not MISSING and bool(is_valid(capsule, NAME))
    return {
        "raised": raised,
        "as_import_error": as_import_error,
        "cause_is_warning": isinstance(cause, Warning),
        "cause_is_ours": type(cause).__name__ == "TorchCDLPackExtWarning",
        "cuda_calls": calls,
        "kind": status.kind.value if status is not None else None,
        "library": str(status.library) if status is not None and status.library else None,
        "package": package,
        "ours": [str(w.message) for w in caught if w.category.__name__ == "TorchCDLPackExtWarning"],
        "others": [f"{w.category.__name__}: {str(w.message)[:300]}" for w in caught
                   if w.category.__name__ != "TorchCDLPackExtWarning"],
        "unchanged": all(after[n] is before[n] for n in (CAPSULE, LEGACY)),
        "capsule_valid": valid,
        "pointer": get_pointer(capsule, NAME) if valid else None,
        "legacy": describe(after[LEGACY]),
        "before": {n: describe(v) for n, v in before.items()},
        "own_pointer": OWN_POINTER,
    }

cases = json.load(open(sys.argv[1], encoding="utf-8"))
for index, case in enumerate(cases):
    print(json.dumps({"begin": index}), flush=True)
    reset()
    apply(case)
    print(json.dumps({"case": index, **run(case)}), flush=True)
"""
)

# --------------------------------------------------------------------------------------
# Cases: what hypothesis generates, and how a case is laid out on disk.
# --------------------------------------------------------------------------------------

MANIFEST_STATES = (
    "regular",
    "missing",
    "empty",
    "truncated",
    "unreadable",
    "directory",
    "fifo",
    "symlink",
    "dangling",
    "swapped",
)
LIBRARY_STATES = (
    "regular",
    "missing",
    "empty",
    "truncated",
    "unreadable",
    "directory",
    "fifo",
    "symlink_inside",
    "symlink_out",
    "swapped",
    "same_size",
)
CAPSULES = ("keep", "delete", "int5", "none", "str", "object", "other_name", "named_heap", "raises")
LEGACIES: tuple[Any, ...] = (
    "absent",
    1,
    2**64,
    -1,
    2**63 - 8,
    0,
    "true",
    "str",
    "float",
    "heap",
    "own",
)
TORCH_STATES = ("ok", "abi_raises", "abi_raises_base", "no_version", "version_float")
FIELDS = (
    "file",
    "torch",
    "torch_build",
    "backend",
    "cxx11_abi",
    "dlpack",
    "toolchain",
    "gpu_toolkit",
    "platform",
    "size",
    "sha256",
)

#: Characters an environment can hold (no NUL, no lone surrogates).
ENV_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=20
)
JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
    | st.sampled_from(["", "\x00", "../x.so", "/etc/passwd", "a" * 5000, "2.x", "cuda", "٣.٨"])
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def manifest_contents(draw: st.DrawFn) -> dict[str, Any]:
    """How the manifest's bytes differ from the valid manifest of the case."""
    # Half the manifests are valid, so that cases with faults elsewhere get that far.
    how = draw(
        st.sampled_from(
            ["valid"] * 8 + ["field", "top", "entry", "bytes", "encoding", "nested", "huge", "nul"]
        )
    )
    spec: dict[str, Any] = {"how": how}
    if how == "field":
        spec["field"] = draw(st.sampled_from(FIELDS))
        spec["value"] = draw(JSON_VALUES)
        spec["drop"] = draw(st.booleans())
    elif how in ("top", "entry"):
        spec["value"] = draw(JSON_VALUES)
    elif how == "bytes":
        spec["data"] = draw(st.binary(max_size=200)).hex()
    elif how == "encoding":
        spec["codec"] = draw(
            st.sampled_from(["utf-16", "utf-32", "latin-1", "utf-8-sig", "cp1252"])
        )
    elif how == "nested":
        spec["depth"] = draw(st.sampled_from([50, 900, 1100, 5000, 200_000]))
    return spec


def env_names() -> st.SearchStrategy[str]:
    known = st.sampled_from([P + name for name in RUNTIME_VARIABLES + BUILD_TIME_VARIABLES])
    unknown = st.text(st.sampled_from("ABCDEFGHIJKLMNOPQRSTUVWXYZ_0123456789"), max_size=10).map(
        lambda s: P + s
    )
    return st.one_of(known, known, known, unknown)


ENV_VALUES = st.one_of(
    st.sampled_from(
        [
            "1",
            "0",
            "true",
            "FALSE",
            "yes",
            "off",
            "On",
            "maybe",
            "",
            " ",
            "2",
            "cpu",
            "cuda",
            "rocm",
            "ROCm",
            "tpu",
            "<lib>",
            "<missing>",
            "<dir>",
            "~nouser/x",
            "~",
            "<fifo>",
        ]
    ),
    ENV_TEXT,
)


@st.composite
def environments(draw: st.DrawFn) -> dict[str, str]:
    env = draw(st.dictionaries(env_names(), ENV_VALUES, max_size=3))
    # Most cases go past the fast path (torch 2.13 has the API): FORCE=1 makes them select.
    if draw(st.integers(0, 4)) and not env.get(P + "FORCE"):
        env[P + "FORCE"] = "1"
    # The backend override decides the GPU rules (issue 13): drawn often, not by chance.
    backend = draw(st.sampled_from([None, None, "cuda", "rocm", "cpu", "CUDA"]))
    if backend is not None:
        env[P + "BACKEND"] = backend
    for name in [n for n in env if n.endswith("CACHE_DIR")]:
        # Only ever inside the case's directory (a JIT build could create it).
        env[name] = draw(st.sampled_from(["<cache>", "<file>/cache", "./rel-cache", ""]))
    return env


@st.composite
def cases(draw: st.DrawFn) -> dict[str, Any]:
    # Each dimension is at its sound value about half the time, so that a case usually
    # holds one or two faults and the later rules are reached, not only the first check.
    def mostly(sound: Any, values: tuple[Any, ...]) -> Any:
        return draw(st.sampled_from((sound,) * len(values) + values))

    return {
        "manifest": draw(manifest_contents()),
        "manifest_state": mostly("regular", MANIFEST_STATES),
        "library_state": mostly("regular", LIBRARY_STATES),
        "backend": draw(st.sampled_from(["cpu", "cpu", "cuda"])),
        "env": draw(environments()),
        "capsule": mostly("keep", CAPSULES),
        "legacy": mostly("absent", LEGACIES),
        "torch": mostly("ok", TORCH_STATES),
        "werror": draw(st.sampled_from([False, False, False, True])),
    }


def _mutate_manifest(valid: dict[str, Any], spec: dict[str, Any]) -> bytes:
    how = spec["how"]
    entry = valid["libraries"][0]
    if how == "field" and spec["drop"]:
        entry.pop(spec["field"], None)
    elif how == "field":
        entry[spec["field"]] = spec["value"]
    elif how == "entry":
        valid["libraries"] = [spec["value"]]
    elif how == "nested":
        entry["extra"] = "@"
        depth = spec["depth"]
        return json.dumps(valid).replace('"@"', "[" * depth + "]" * depth).encode()
    elif how == "nul":  # a NUL inside the file name, and a raw one after the document
        entry["file"] += "\x00.so"
        return json.dumps(valid).encode() + b"\x00"
    raw = {
        "top": lambda: json.dumps(spec["value"]).encode(),
        "bytes": lambda: bytes.fromhex(spec["data"]),
        "encoding": lambda: (
            json.dumps(valid, ensure_ascii=False)
            .replace('"test"', '"t\u00e9st \u00fcn\u00efcode"')
            .encode(spec["codec"])
        ),
        "huge": lambda: json.dumps(valid).encode()[:-1] + b" " * (1 << 20) + b"}",
    }.get(how)
    return raw() if raw else json.dumps(valid).encode()


def materialize(
    where: Path, case: dict[str, Any], library: Path, *, torch_minor: str, abi: bool, build: str
) -> dict[str, Any]:
    """Lay ``case`` out under ``where``; return what the worker needs (JSON)."""
    backend = Backend(case["backend"])
    root = make_package(where / "root", [Bundled(library, torch_minor, backend, abi, build)])
    package = root / PACKAGE
    manifest = package / MANIFEST_NAME
    (bundled,) = (package / "libs").iterdir()
    valid = json.loads(manifest.read_text(encoding="utf-8"))
    library_bytes = bundled.read_bytes()
    manifest_bytes = _mutate_manifest(valid, case["manifest"])

    def place(path: Path, content: bytes, how: str, *, outside: Path) -> None:
        path.unlink()
        if how in ("regular", "unreadable", "same_size"):
            path.write_bytes(bytes(len(content)) if how == "same_size" else content)
            if how == "unreadable":
                path.chmod(0)  # as root this still reads: then it is the "regular" case
        elif how == "truncated":
            path.write_bytes(content[: len(content) // 2])
        elif how == "empty":
            path.write_bytes(b"")
        elif how == "directory":
            path.mkdir()
        elif how == "fifo":
            os.mkfifo(path)
        elif how in ("symlink", "symlink_inside"):
            real = path.with_name("real-" + path.name)
            real.write_bytes(content)
            path.symlink_to(real.name)
        elif how == "symlink_out":
            outside.write_bytes(content)
            path.symlink_to(outside)
        elif how == "dangling":
            path.symlink_to(path.with_name("nowhere"))
        elif how == "swapped":
            path.write_bytes(library_bytes if path == manifest else manifest_bytes)
        # "missing": nothing

    manifest.write_bytes(b"")
    place(manifest, manifest_bytes, case["manifest_state"], outside=where / "outside.json")
    place(bundled, library_bytes, case["library_state"], outside=where / "outside.so")
    (where / "a-dir").mkdir()
    (where / "a-file").write_bytes(b"not a directory")
    os.mkfifo(where / "a-fifo")
    substitutes = {
        "<lib>": str(library),
        "<missing>": str(where / "missing.so"),
        "<dir>": str(where / "a-dir"),
        "<fifo>": str(where / "a-fifo"),
        "<cache>": str(where / "cache"),
        "<file>/cache": str(where / "a-file" / "cache"),
        "./rel-cache": str(where / "rel-cache"),
    }
    env = {name: substitutes.get(value, value) for name, value in case["env"].items()}
    return {**case, "env": env, "root": str(root)}


# --------------------------------------------------------------------------------------
# The invariant.
# --------------------------------------------------------------------------------------

PUBLISHED = {"load", "jit", "publish_legacy"}


def _check_import_error(result: dict[str, Any], where: str) -> None:
    """Under warnings-as-errors: what left the import is what consumers' ``except
    ImportError`` guards catch (issue 18), and nothing was left on ``torch.Tensor``."""
    assert result["as_import_error"], (result["raised"], where)
    assert result["cause_is_warning"], (result["raised"], where)
    assert result["unchanged"], f"raised but torch.Tensor changed\n{where}"
    if result["cause_is_ours"]:
        assert "made this warning an error" in result["raised"], result["raised"]


def check(case: dict[str, Any], result: dict[str, Any]) -> None:
    where = f"case {json.dumps({k: v for k, v in case.items() if k != 'root'})[:1500]}"
    assert result["cuda_calls"] == [], (result["cuda_calls"], where)
    if case.get("werror") and result["raised"] is not None:
        _check_import_error(result, where)
        return
    if case.get("werror"):
        # Nothing to say, so nothing raised: published, deferred or disabled.
        assert result["kind"] in PUBLISHED | {"defer", "disabled"}, (result, where)
    assert result["raised"] is None, f"import raised {result['raised']}\n{where}"
    assert result["package"].startswith(case["root"]), (result["package"], where)
    ours, kind = result["ours"], result["kind"]
    assert len(ours) <= 1, (ours, where)
    quiet_by_design = kind in ("defer", "disabled")
    if kind not in PUBLISHED and not quiet_by_design:
        assert len(ours) == 1, f"nothing published ({kind}) and {len(ours)} warnings\n{where}"
    for message in ours:
        assert message.startswith("torch-c-dlpack-ext: "), message
        assert "Traceback" not in message, message
        assert len(message) <= 1500, (len(message), message[:3000])
        assert message.count("\n") <= 4, message
        sentences = [s for s in message.split(". ") if len(s) > 20]
        assert len(sentences) == len(set(sentences)), f"repeated: {message}"
        # One remedy, named once (issue 11: "...; reinstall X. reinstall X (pip install ...)").
        # The build-from-source remedy is one command line whose first part installs the
        # build requirements (``pip install ... && pip install ...``): that is one remedy.
        assert message.count("--force-reinstall") <= 1, f"remedy repeated: {message}"
        chained = message.count(" && pip install")
        assert message.count("pip install") <= 1 + chained, f"remedy repeated: {message}"
        # No generated manifest is a valid one without libraries (keys are at most 5
        # characters), so this text would misreport a broken manifest (issue 11).
        assert "universal wheel" not in message, message
        if case["torch"] != "abi_raises_base":
            # The boundary caught something the selector should have reported itself.
            assert "selecting a library failed" not in message, f"{message}\n{where}"
    if kind in PUBLISHED:
        assert result["capsule_valid"], (result, where)
        if kind != "publish_legacy":
            assert result["legacy"] == result["pointer"], (result, where)
            if not any(n.endswith("LIBRARY") and v for n, v in case["env"].items()):
                assert result["library"].startswith(case["root"]), (result, where)
    else:
        assert result["unchanged"], f"nothing published but torch.Tensor changed\n{where}"
    if kind == "defer":
        assert case["capsule"] == "keep", (result, where)
        assert case["legacy"] == "absent", (result, where)
    bogus = case["capsule"] not in ("keep", "delete") or case["legacy"] not in ("absent", "own")
    decided_before_torch = ours and ("fix or unset" in ours[0] or "cannot describe" in ours[0])
    if bogus and ours and case["torch"] == "ok" and not decided_before_torch:
        assert "torch.Tensor.__" in ours[0], (ours[0], where)
    backend = case["env"].get(P + "BACKEND", "").strip().lower()
    if kind == "load" and backend in ("cuda", "rocm") and not case["env"].get(P + "LIBRARY"):
        assert f"-{backend}-" in result["library"], (result, where)


def run_cases(
    tmp: Path,
    batch: list[dict[str, Any]],
    *,
    python: Path | str = sys.executable,
    mode: str = "batch",
    env_extra: dict[str, str] | None = None,
    timeout: float = 300,
) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Run ``batch`` (materialized cases) in one worker; return (case, result) pairs."""
    spec = tmp / "cases.json"
    spec.write_text(json.dumps(batch), encoding="utf-8")
    bin_dir = tmp / "bin"  # no compiler: a JIT build (ours or tvm-ffi's) fails fast
    bin_dir.mkdir(exist_ok=True)
    env = clean_env(
        PATH=str(bin_dir), CXX="", CC="", XDG_CACHE_HOME=str(tmp / "xdg"), **(env_extra or {})
    )
    proc = run_python(WORKER, env=env, python=python, timeout=timeout, args=[str(spec), mode])
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    begun = [line["begin"] for line in lines if "begin" in line]
    results = {line["case"]: line for line in lines if "case" in line}
    assert proc.returncode == 0, (
        f"worker died with {proc.returncode} during case {begun[-1] if begun else None}: "
        f"{json.dumps(batch[begun[-1]] if begun else None)[:2000]}\n{proc.stderr[-3000:]}"
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert sorted(results) == list(range(len(batch))), proc.stdout[-2000:]
    return [(batch[i], results[i]) for i in range(len(batch))]


@pytest.fixture(scope="module")
def fake_library(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_fake_library(tmp_path_factory.mktemp("totality-lib"))


def _remove(path: Path) -> None:
    def writable(func: Any, target: str, _: Any) -> None:
        os.chmod(target, stat.S_IRWXU)
        func(target)

    shutil.rmtree(path, onerror=writable)


# --------------------------------------------------------------------------------------
# The properties.
# --------------------------------------------------------------------------------------


@settings(
    max_examples=BATCHES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(batch=st.lists(cases(), min_size=BATCH, max_size=BATCH))
def test_import_is_total(
    batch: list[dict[str, Any]], fake_library: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    tmp = tmp_path_factory.mktemp("totality")
    try:
        laid_out = [
            materialize(
                tmp / f"c{i}",
                case,
                fake_library,
                torch_minor=TORCH_MINOR,
                abi=ABI,
                build=torch.__version__,
            )
            for i, case in enumerate(batch)
        ]
        for case, result in run_cases(tmp, laid_out):
            check(case, result)
        count_case("import totality: generated cases (one interpreter per batch)", len(batch))
    finally:
        _remove(tmp)


def _single_fault_cases() -> list[tuple[str, dict[str, Any], str]]:
    """(id, case, a fragment the one warning must contain): one fault at a time."""
    base: dict[str, Any] = {
        "manifest": {"how": "valid"},
        "manifest_state": "regular",
        "library_state": "regular",
        "backend": "cpu",
        "env": {P + "FORCE": "1"},
        "capsule": "keep",
        "legacy": "absent",
        "torch": "ok",
    }
    table: list[tuple[str, dict[str, Any], str]] = [
        ("manifest-missing", {"manifest_state": "missing"}, "no manifest at"),
        ("manifest-empty", {"manifest_state": "empty"}, "is empty"),
        ("manifest-truncated", {"manifest_state": "truncated"}, "not valid JSON"),
        ("manifest-directory", {"manifest_state": "directory"}, "is a directory"),
        ("manifest-fifo", {"manifest_state": "fifo"}, "is a FIFO"),
        ("manifest-dangling", {"manifest_state": "dangling"}, "no manifest at"),
        ("manifest-swapped", {"manifest_state": "swapped"}, "not UTF-8"),
        ("manifest-utf16", {"manifest": {"how": "encoding", "codec": "utf-16"}}, "not UTF-8"),
        ("manifest-nested", {"manifest": {"how": "nested", "depth": 200_000}}, "nested too"),
        ("manifest-huge", {"manifest": {"how": "huge"}}, "more than a manifest can be"),
        ("manifest-nul", {"manifest": {"how": "nul"}}, "not valid JSON"),
        (
            "size-string",
            {"manifest": {"how": "field", "field": "size", "value": "39448", "drop": False}},
            "size is a string ('39448'), expected an integer",
        ),
        (
            "torch-number",
            {"manifest": {"how": "field", "field": "torch", "value": 2.8, "drop": False}},
            "torch is a number (2.8)",
        ),
        (
            "file-number",
            {"manifest": {"how": "field", "field": "file", "value": 123, "drop": False}},
            "file is a number (123)",
        ),
        (
            "sha-number",
            {"manifest": {"how": "field", "field": "sha256", "value": 0, "drop": False}},
            "sha256 is a number (0)",
        ),
        (
            "abi-array",
            {"manifest": {"how": "field", "field": "cxx11_abi", "value": [1], "drop": False}},
            "cxx11_abi is an array",
        ),
        (
            "file-5000",
            {"manifest": {"how": "field", "field": "file", "value": "a" * 5000, "drop": False}},
            "(5000 characters)",
        ),
        ("library-missing", {"library_state": "missing"}, "is missing"),
        ("library-empty", {"library_state": "empty"}, "0 bytes, the manifest says"),
        ("library-truncated", {"library_state": "truncated"}, "bytes, the manifest says"),
        ("library-directory", {"library_state": "directory"}, "is a directory"),
        ("library-fifo", {"library_state": "fifo"}, "is a FIFO"),
        ("library-symlink-out", {"library_state": "symlink_out"}, "leads outside the package"),
        ("library-swapped", {"library_state": "swapped"}, "the manifest says"),
        ("library-same-size", {"library_state": "same_size"}, "does not match the manifest"),
        ("capsule-5", {"capsule": "int5"}, "__dlpack_c_exchange_api__ is int 5"),
        ("capsule-none", {"capsule": "none"}, "__dlpack_c_exchange_api__ is NoneType"),
        ("capsule-other", {"capsule": "other_name"}, "a PyCapsule of another name"),
        # Well named, but holding a heap address: checked like the legacy int.
        ("capsule-bad-pointer", {"capsule": "named_heap"}, "__dlpack_c_exchange_api__'s pointer"),
        ("capsule-raises", {"capsule": "raises"}, "raised RuntimeError"),
        ("legacy-1", {"legacy": 1}, "__c_dlpack_exchange_api__ = 1 is not a valid"),
        ("legacy-2**64", {"legacy": 2**64}, "is not a valid table address"),
        ("legacy-heap", {"legacy": "heap"}, "does not point into a loaded shared library"),
        ("abi-raises", {"torch": "abi_raises"}, "cannot describe the running torch"),
        ("no-version", {"torch": "no_version"}, "cannot describe the running torch"),
        ("version-float", {"torch": "version_float"}, "torch.__version__ is float"),
        ("base-exception", {"torch": "abi_raises_base"}, "InjectedBaseException: injected"),
        ("bad-bool", {"env": {P + "FORCE": "maybe"}}, f"{P}FORCE='maybe' is not a boolean"),
        ("unknown-name", {"env": {P + "FORCE": "1", P + "BAKEND": "x"}}, "did you mean"),
        ("library-tilde", {"env": {P + "FORCE": "1", P + "LIBRARY": "~nouser/x"}}, "LIBRARY"),
        (
            # BACKEND=cuda on this CPU torch: an override that conflicts with its build
            # (issue 31, item 8; the GPU torch without its library is test_decide's table).
            "gpu-backend-on-cpu-torch",
            {"env": {P + "FORCE": "1", P + "BACKEND": "cuda"}},
            f"{P}BACKEND=cuda conflicts with the torch build",
        ),
        (
            "jit-without-compiler",
            {
                "env": {P + "FORCE": "1", P + "JIT": "1", P + "CACHE_DIR": "<cache>"},
                "manifest_state": "missing",
            },
            "the JIT build of the cpu library",
        ),
    ]
    return [(name, {**base, **change}, says) for name, change, says in table]


SINGLE_FAULTS = _single_fault_cases()


def test_each_single_fault_gives_one_warning_naming_it(tmp_path: Path, fake_library: Path) -> None:
    laid_out = [
        materialize(
            tmp_path / name,
            case,
            fake_library,
            torch_minor=TORCH_MINOR,
            abi=ABI,
            build=torch.__version__,
        )
        for name, case, _ in SINGLE_FAULTS
    ]
    failures = []
    for (name, _, says), (case, result) in zip(SINGLE_FAULTS, run_cases(tmp_path, laid_out)):
        check(case, result)
        # A bogus torch attribute is ignored: ours is published in its place, with the one
        # warning naming it. Every other fault publishes nothing.
        expected = "load" if name.startswith(("capsule-", "legacy-")) else "unavailable"
        if result["kind"] != expected:
            failures.append(f"{name}: {result['kind']}, expected {expected}: {result['ours']}")
        elif len(result["ours"]) != 1 or says.lower() not in result["ours"][0].lower():
            failures.append(f"{name}: {says!r} not in {result['ours']}")
    count_case("import totality: single faults", len(SINGLE_FAULTS))
    assert failures == [], "\n".join(failures)


WERROR_CASES = (
    # (name, change, raises, what the ImportError says)
    ("valid", {}, False, ""),
    ("manifest-missing", {"manifest_state": "missing"}, True, "no manifest at"),
    ("library-truncated", {"library_state": "truncated"}, True, "bytes, the manifest says"),
    ("bad-bool", {"env": {P + "FORCE": "maybe"}}, True, f"{P}FORCE='maybe' is not a boolean"),
    # The boundary's own warning (an exception the selector let out), made an error.
    ("base-exception", {"torch": "abi_raises_base"}, True, "InjectedBaseException: injected"),
    ("disabled", {"env": {P + "DISABLE": "1"}}, False, ""),
)


def test_warnings_as_errors_give_an_import_error_or_nothing(
    tmp_path: Path, fake_library: Path
) -> None:
    """Under ``-W error`` (issue 18): where nothing can be published, an ImportError
    subclass with our warning as its cause, naming the cause and the remedy (consumers
    guard the import with ``except ImportError``); the normal load path raises nothing
    and publishes."""
    (_, base, _) = SINGLE_FAULTS[0]
    base = {**base, "manifest_state": "regular", "werror": True}
    laid_out = [
        materialize(
            tmp_path / name,
            {**base, **change},
            fake_library,
            torch_minor=TORCH_MINOR,
            abi=ABI,
            build=torch.__version__,
        )
        for name, change, _, _ in WERROR_CASES
    ]
    failures = []
    for (name, _, raises, says), (case, result) in zip(WERROR_CASES, run_cases(tmp_path, laid_out)):
        check(case, result)
        if not raises:
            if result["raised"] is not None:
                failures.append(f"{name}: raised {result['raised']}")
            continue
        if result["raised"] is None:
            failures.append(f"{name}: raised nothing ({result['kind']})")
            continue
        raised = result["raised"]
        if not raised.startswith("WarningAsImportError: torch-c-dlpack-ext: "):
            failures.append(f"{name}: {raised}")
        elif says.lower() not in raised.lower() or not result["cause_is_ours"]:
            failures.append(f"{name}: {says!r} not in {raised} (or not our warning's cause)")
        elif f"{P}DISABLE=1" not in raised:
            failures.append(f"{name}: no remedy in {raised}")
    assert len(laid_out) == len(WERROR_CASES)
    assert failures == [], "\n".join(failures)
    count_case("import totality: warnings as errors", len(WERROR_CASES))


def test_the_valid_case_publishes(tmp_path: Path, fake_library: Path) -> None:
    """The control: without a fault the same layout publishes, so the faults above are what
    stopped it."""
    (_, base, _) = SINGLE_FAULTS[0]
    case = {**base, "manifest_state": "regular"}
    laid_out = materialize(
        tmp_path / "ok",
        case,
        fake_library,
        torch_minor=TORCH_MINOR,
        abi=ABI,
        build=torch.__version__,
    )
    ((_, result),) = run_cases(tmp_path, [laid_out])
    check(laid_out, result)
    assert result["kind"] == "load", result
    assert result["ours"] == [], result["ours"]
    assert result["pointer"] == result["legacy"]


# --------------------------------------------------------------------------------------
# The boundary itself: every BaseException subclass, raised from inside the selector.
# --------------------------------------------------------------------------------------

BOUNDARY = r"""
import builtins, json, sys, types, warnings
import torch

MISSING = object()
ATTRS = ("__dlpack_c_exchange_api__", "__c_dlpack_exchange_api__")
original = {n: torch.Tensor.__dict__.get(n, MISSING) for n in ATTRS}

class CustomBase(BaseException):
    pass

class Unprintable(BaseException):
    def __str__(self):
        raise RuntimeError("str() of this exception fails too")

def all_subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from all_subclasses(sub)

def instance(cls):
    for args in ((), ("boom",), ("utf-8", b"x", 0, 1, "boom")):
        try:
            return cls(*args)
        except Exception:
            continue
    return None

classes = sorted({c for c in all_subclasses(BaseException)
                  if not issubclass(c, (KeyboardInterrupt, SystemExit, Warning))
                  and c.__module__ in ("builtins", "__main__")}, key=lambda c: c.__name__)
results = []
for cls in classes + [CustomBase, Unprintable]:
    exc = instance(cls)
    if exc is None:
        continue
    for name in [m for m in sys.modules if m.startswith("torch_c_dlpack_ext")]:
        del sys.modules[name]
    # With FORCE set, the selector is the import's first call into a submodule.
    fake = types.ModuleType("torch_c_dlpack_ext._apply")
    def select_and_load(environ, package_dir, exc=exc):
        # Half-way through publishing, then the unexpected.
        torch.Tensor.__c_dlpack_exchange_api__ = 12345
        torch.Tensor.__dlpack_c_exchange_api__ = "half-published"
        raise exc
    fake.select_and_load = select_and_load
    sys.modules["torch_c_dlpack_ext._apply"] = fake
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            import torch_c_dlpack_ext
            escaped = None
        except BaseException as e:
            escaped = type(e).__name__
    restored = all(torch.Tensor.__dict__.get(n, MISSING) is original[n] for n in ATTRS)
    ours = [str(w.message) for w in caught if w.category.__name__ == "TorchCDLPackExtWarning"]
    results.append({"cls": cls.__name__, "escaped": escaped, "restored": restored, "ours": ours})
print(json.dumps(results))
"""


def test_the_import_boundary_catches_every_base_exception(tmp_path: Path) -> None:
    root = make_package(tmp_path)
    proc = run_python(BOUNDARY, pythonpath=[root], env=clean_env(**{P + "FORCE": "1"}), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    names = {r["cls"] for r in results}
    # The hierarchy really was walked: BaseException's odd children and a custom one.
    assert {"GeneratorExit", "CustomBase", "Unprintable", "RecursionError", "OSError"} <= names
    problems = [
        r
        for r in results
        if r["escaped"]
        or not r["restored"]
        or len(r["ours"]) != 1
        or f"{r['cls']}" not in r["ours"][0]
        or "nothing published" not in r["ours"][0]
    ]
    count_case("import boundary: BaseException subclasses", len(results))
    assert problems == [], problems[:5]


def test_keyboard_interrupt_passes_and_a_warning_as_error_is_an_import_error(
    tmp_path: Path,
) -> None:
    root = make_package(tmp_path, manifest=False)
    code = r"""
import sys, types, warnings
import torch
for name in ("KeyboardInterrupt", "SystemExit"):
    for m in [m for m in sys.modules if m.startswith("torch_c_dlpack_ext")]:
        del sys.modules[m]
    fake = types.ModuleType("torch_c_dlpack_ext._apply")
    def select_and_load(environ, package_dir, name=name):
        torch.Tensor.__c_dlpack_exchange_api__ = 1
        raise getattr(__builtins__, name)()
    fake.select_and_load = select_and_load
    sys.modules["torch_c_dlpack_ext._apply"] = fake
    try:
        import torch_c_dlpack_ext
        print(name, "swallowed")
    except BaseException as e:
        left = "__c_dlpack_exchange_api__" in torch.Tensor.__dict__
        print(name, "passed", type(e).__name__, left)
for m in [m for m in sys.modules if m.startswith("torch_c_dlpack_ext")]:
    del sys.modules[m]
warnings.simplefilter("error")
try:
    import torch_c_dlpack_ext
    print("warning swallowed")
except ImportError as e:
    print("warning passed", type(e).__name__, type(e.__cause__).__name__)
"""
    proc = run_python(code, pythonpath=[root], env=clean_env(**{P + "FORCE": "1"}), timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:3] == [
        "KeyboardInterrupt passed KeyboardInterrupt False",
        "SystemExit passed SystemExit False",
        "warning passed WarningAsImportError TorchCDLPackExtWarning",
    ], proc.stdout


# --------------------------------------------------------------------------------------
# The consumer: real apache-tvm-ffi on a real torch 2.8 (which lacks the API).
# --------------------------------------------------------------------------------------

TVM_TORCH = "2.8.0"


@pytest.fixture(scope="module")
def tvm_env(old_torch_env: Any) -> Any:
    return old_torch_env(TVM_TORCH)


@pytest.mark.slow
@settings(
    max_examples=TVM_CASES,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=cases())
def test_import_tvm_ffi_is_total_and_builds_no_addon(
    case: dict[str, Any],
    tvm_env: Any,
    fake_library: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # torch 2.8 has neither attribute; tvm-ffi itself trusts any attribute it finds (and
    # then never imports us) and calls torch.cuda.is_available itself, so the tvm-ffi cases
    # leave torch alone: they vary the installation and the environment.
    case = {**case, "capsule": "keep", "legacy": "absent", "torch": "ok", "werror": False}
    tmp = tmp_path_factory.mktemp("tvm-totality")
    try:
        laid_out = materialize(
            tmp / "c", case, fake_library, torch_minor="2.8", abi=True, build="2.8.0"
        )
        cache = tmp / "tvm-cache"
        ((_, result),) = run_cases(
            tmp,
            [laid_out],
            python=tvm_env.python,
            mode="tvm",
            env_extra={"TVM_FFI_CACHE_DIR": str(cache)},
        )
        check(laid_out, result)
        # tvm-ffi never built its own addon (it could not: no compiler), and when we
        # published, it did not even try.
        assert not list(cache.rglob("*.so")) if cache.exists() else True
        if result["kind"] in PUBLISHED:
            assert not any("Failed to JIT" in w for w in result["others"]), result["others"]
        count_case("import totality: tvm-ffi on torch 2.8 (one process each)", 1)
    finally:
        _remove(tmp)


#: tvm-ffi's own warning when its fallback (JIT-compiling its addon) fails, as it must here
#: (no compiler, no setuptools): under -W error that one is tvm-ffi's to raise.
TVM_OWN_WARNING = "Failed to JIT torch c dlpack extension"


@pytest.mark.slow
@pytest.mark.parametrize("tvm_warning", ["error", "ignored"])
def test_import_tvm_ffi_under_warnings_as_errors_falls_back(
    tmp_path: Path, tvm_env: Any, tvm_warning: str
) -> None:
    """Issue 18: ``python -W error -c "import tvm_ffi"`` with no usable library
    (``BACKEND=rocm`` on PyPI's CUDA torch 2.8 stands in for one): our import fails with an
    ImportError, which tvm-ffi's guard catches, and tvm-ffi goes on to its own path. That
    path here ends in tvm-ffi's own warning (it cannot build its addon), which ``-W error``
    raises from tvm-ffi itself; with that one warning let through, the import succeeds.
    Either way nothing of ours escapes (before, our warning did)."""
    root = make_package(tmp_path / "pkg", manifest=False)
    bin_dir = tmp_path / "bin"  # no compiler: tvm-ffi's own addon build fails fast
    bin_dir.mkdir()
    filters = "error" if tvm_warning == "error" else f"error,ignore:{TVM_OWN_WARNING}:UserWarning"
    code = (
        "import sys, tvm_ffi\n"
        "assert 'torch_c_dlpack_ext' not in sys.modules\n"  # its import failed, cleanly
        "print('ok')\n"
    )
    proc = run_python(
        code,
        pythonpath=[root],
        python=tvm_env.python,
        env=clean_env(
            **{P + "BACKEND": "rocm"},
            PYTHONWARNINGS=filters,  # python -W error [-W ignore:...]
            PATH=str(bin_dir),
            CXX="",
            CC="",
            TVM_FFI_CACHE_DIR=str(tmp_path / "tvm-cache"),
        ),
        timeout=300,
    )
    assert "TorchCDLPackExtWarning" not in proc.stderr, proc.stderr[-3000:]
    assert "WarningAsImportError" not in proc.stderr, proc.stderr[-3000:]
    if tvm_warning == "ignored":
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert proc.stdout.strip().endswith("ok"), proc.stdout
    else:
        assert proc.returncode == 0 or f"UserWarning: {TVM_OWN_WARNING}" in proc.stderr, (
            proc.stderr[-3000:]
        )
