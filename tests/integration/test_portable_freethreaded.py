"""The portable table under free-threaded CPython: 16 threads exporting (owning and
non-owning), importing and allocating through it at once, with the cyclic GC running
beside them, on CPython 3.14t with torch 2.9.1 (and 3.13t where a torch env for it is
cached).

The table is called from a small C extension (fixtures/portable_ft_driver.c), not
ctypes: on 3.14t with torch 2.9.1, threads that make and drop torch tensors and use
``ctypes.cast`` while another thread runs the cyclic GC crash the interpreter, with no
table and no DLPack at all (``CTYPES_TORCH_CRASH`` below, kept as the repro; docs/facts.md; also
with ``PYTHON_GIL=1``). A
ctypes-driven stress of the table crashed the same way and was first blamed on the table:
the same table calls made from C pass.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from tests.helpers import TVM_FFI, build_portable_library, clean_env, run_python

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).resolve().parent / "fixtures" / "portable_ft_driver.c"
TORCH = "2.9.1"

#: 16 threads, each: an owning export deleted at once, a round trip (export, then import
#: of that export), an allocation imported as a tensor, and non-owning exports of a tensor
#: all threads share (first export of a fresh one included); one more thread runs gc.
STRESS = r"""
import gc, os, sys, threading
import torch
sys.path.insert(0, sys.argv[2])
import tcde_ft_driver as driver
driver.load(sys.argv[1])
THREADS, ROUNDS = 16, int(sys.argv[3])
shared = [torch.arange(12.0).reshape(3, 4)]
barrier = threading.Barrier(THREADS)
problems = []

def work(n):
    barrier.wait()
    try:
        for i in range(ROUNDS):
            t = torch.full((3, n % 4 + 1), float(n))
            driver.export_delete(t)
            back = driver.round_trip(t)
            assert back.shape == t.shape and float(back[2, 0]) == n, (back.shape, t.shape)
            del back
            x = driver.alloc_import(n + i % 5 + 1)
            x.fill_(n)
            assert x.shape == (n + i % 5 + 1,) and float(x.sum()) == n * x.numel()
            del x
            if i % 50 == 0 and n == 0:
                shared[0] = torch.arange(12.0).reshape(3, 4)
            view = shared[0]
            assert driver.view_dims(view) == ((3, 4), (4, 1))
            assert driver.view_dims(t.t()) == ((t.shape[1], 3), (1, t.shape[1]))
    except BaseException as exc:
        problems.append(f"thread {n}: {exc!r}")

done = False
def collect():
    while not done:
        gc.collect()

threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
collector = threading.Thread(target=collect)
collector.start()
for t in threads: t.start()
for t in threads: t.join()
done = True
collector.join()
assert not problems, problems[:5]
print("stress ok", sys._is_gil_enabled())
"""

#: 16 threads make the first non-owning export of one fresh tensor at once, read the
#: shape and strides handed out after running Python code (which merges the reference
#: counts other threads dropped), each round a new tensor. Before the dims_cache lock two
#: threads could both insert an entry, the second freeing the Dims the first handed out:
#: a heap-use-after-free AddressSanitizer reports (the library and driver built with it).
FIRST_VIEWS = r"""
import sys, threading
import torch
sys.path.insert(0, sys.argv[2])
import tcde_ft_driver as driver
driver.load(sys.argv[1])
THREADS, ROUNDS = 16, int(sys.argv[3])
barrier = threading.Barrier(THREADS)
slot = [None]
problems = []

def spin():
    return sum(range(200))

def work(n):
    for r in range(ROUNDS):
        if n == 0:
            slot[0] = torch.empty(2 + r % 3, 5)
        barrier.wait()
        t = slot[0]
        got = driver.view_dims(t, 50, spin)
        if got != (tuple(t.shape), tuple(t.stride())):
            problems.append((r, got))
        barrier.wait()

threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
for t in threads: t.start()
for t in threads: t.join()
assert not problems, problems[:5]
print("first views ok")
"""

#: No table, no DLPack: torch tensors made and dropped in threads, each with a
#: ``ctypes.cast`` (which leaves a reference cycle: the source's ``_objects`` dict holds the
#: source), while another thread runs ``gc.collect()``. CPython 3.14t + torch 2.9.1
#: segfault (in the GC's finalize_garbage / update_refs, or a dict_dealloc during a
#: cross-thread refcount merge), also with PYTHON_GIL=1; with plain objects instead of
#: tensors, or plain reference cycles instead of ctypes.cast, or one thread, it does not.
#: The repro, run by hand with the dev cache's 3.14t torch env; not a test, since a test
#: that passes whether torch crashes or not could not fail.
CTYPES_TORCH_CRASH = r"""
import ctypes, gc, threading
import torch
barrier = threading.Barrier(16)
def work(n):
    barrier.wait()
    for _ in range(3000):
        t = torch.full((3, n % 4 + 1), float(n))
        ctypes.cast(ctypes.c_void_p(t.data_ptr()), ctypes.POINTER(ctypes.c_int64))
done = False
def collect():
    while not done:
        gc.collect()
threads = [threading.Thread(target=work, args=(n,)) for n in range(16)]
collector = threading.Thread(target=collect)
collector.start()
for t in threads: t.start()
for t in threads: t.join()
done = True
print("no crash")
"""


def _free_threaded(version: str) -> tuple[Path, Path]:
    """(interpreter, include dir) of the dev cache's free-threaded CPython, or skip."""
    from devtools.envs import freethreaded

    prefix = freethreaded.prefix_for(version)
    found = freethreaded._read(version, prefix)
    if found is None:
        pytest.skip(f"no {version} CPython in the dev cache (nox -s freethreaded builds one)")
    return found.executable, found.include_dir


def _torch_python(version: str, interpreter: Path, observer: Any) -> Path:
    """The free-threaded torch env's python: created for 3.14t, only reused for others
    (``observer``: the ``env_observer`` fixture)."""
    from devtools.envs import envspec, torchenv

    extra = (TVM_FFI.split("==")[0],)
    if version != "3.14t":
        name = envspec.env_name(TORCH, version, torchenv.EnvKind.IMPORTABLE, extra)
        if not (torchenv.dev_cache_root() / "envs" / name / "bin" / "python").is_file():
            pytest.skip(f"no torch {TORCH} env for {version} in the dev cache ({name})")
    env = torchenv.torch_env(
        TORCH,
        kind=torchenv.EnvKind.IMPORTABLE,
        python=version,
        interpreter=interpreter,
        extra=extra,
        observer=observer,
    )
    return Path(env.python)


def _driver(tmp_path: Path, python: Path, include: Path, extra_flags: tuple[str, ...] = ()) -> Path:
    import tvm_ffi.libinfo

    ask = "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))"
    suffix = subprocess.run(
        [str(python), "-I", "-c", ask],
        capture_output=True, text=True, check=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    out = tmp_path / "driver" / f"tcde_ft_driver{suffix}"
    out.parent.mkdir(parents=True, exist_ok=True)
    cc = shutil.which("gcc") or shutil.which("cc") or "gcc"
    subprocess.run(
        [cc, "-std=c11", "-O1", "-fPIC", "-shared", "-Wall", "-Werror",
         f"-I{include}", f"-I{tvm_ffi.libinfo.find_dlpack_include_path()}",
         *extra_flags, "-o", str(out), str(DRIVER), "-ldl"],
        check=True, timeout=120,
    )  # fmt: skip
    return out


@pytest.mark.parametrize("version", ["3.14t", "3.13t"])
def test_sixteen_threads_export_import_and_allocate_at_once(
    tmp_path: Path, version: str, env_observer: Any
) -> None:
    interpreter, include = _free_threaded(version)
    python = _torch_python(version, interpreter, env_observer)
    library = build_portable_library(tmp_path / "lib", limited_api=None, python_include=include)
    driver = _driver(tmp_path, python, include)
    proc = run_python(
        STRESS, args=[str(library), str(driver.parent), "1500"], env=clean_env(),
        python=python, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-6000:]}"
    assert "stress ok False" in proc.stdout, proc.stdout + proc.stderr[-3000:]


def test_first_non_owning_exports_of_one_tensor_free_nothing_handed_out(
    tmp_path: Path, env_observer: Any
) -> None:
    """dltensor_from_py_object_no_sync from 16 threads on one fresh tensor: the shape and
    strides each thread got stay valid (AddressSanitizer: no heap-use-after-free)."""
    interpreter, include = _free_threaded("3.14t")
    python = _torch_python("3.14t", interpreter, env_observer)
    cc = shutil.which("gcc")
    asan = "" if cc is None else subprocess.run(
        [cc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=False
    ).stdout.strip()  # fmt: skip
    if not asan or not Path(asan).is_file():
        pytest.skip("needs gcc's AddressSanitizer runtime (libasan.so)")
    flags = ("-fsanitize=address", "-fno-omit-frame-pointer", "-g")
    library = build_portable_library(
        tmp_path / "lib", limited_api=None, python_include=include, extra_flags=flags
    )
    driver = _driver(tmp_path, python, include, flags)
    env = clean_env(LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0:halt_on_error=1")
    proc = run_python(
        FIRST_VIEWS, args=[str(library), str(driver.parent), "1500"], env=env,
        python=python, timeout=600,
    )  # fmt: skip
    assert "AddressSanitizer" not in proc.stderr, proc.stderr[-6000:]
    assert proc.returncode == 0, f"rc={proc.returncode}\n{proc.stdout}\n{proc.stderr[-6000:]}"
    assert "first views ok" in proc.stdout
