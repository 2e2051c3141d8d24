"""csrc/tcde_convert.h's device-type mapping, compiled for each backend and checked against
THE rules (tests/conformance/tables.py, GPU_RULES; issue 37).

A ROCm torch cannot be had here (PyPI publishes no ROCm torch or headers), so the ROCm
build of the library cannot compile in CI. The mapping itself needs no GPU header: this
test compiles tcde_convert.h with each of TCDE_BACKEND_CPU / _CUDA / _ROCM defined against
the running (CPU) torch's headers, runs a small program that prints what each backend
answers (the stream rule for every minor 2.4-2.15, the memory mapping, the device ids c10
can index), and compares every line with the table.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from _torch_c_dlpack_ext_core.driver import BuildRequest, plan_build
from _torch_c_dlpack_ext_core.headers import find_dlpack_include
from _torch_c_dlpack_ext_core.torchinstall import TorchInstall

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# The program: one line per question, `kind key... = answer`. Device types are probed over
# every DLPack type up to kDLTrn (18) and a few out of range; c10 DeviceType values are
# probed by name.
PROGRAM = r"""
#include "tcde_convert.h"

#include <cstdio>

namespace {
const char* Str(const char* s) { return s != nullptr ? s : "none"; }
}  // namespace

int main() {
  const int32_t types[] = {-1, 0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 99};
  for (int32_t type : types) {
    for (int minor = 4; minor <= 15; ++minor) {
      std::printf("stream %d %d = %d %s\n", type, minor, tcde::AnswersStream(type, 2, minor),
                  Str(tcde::StreamBackendServing(type, 2, minor)));
    }
    // The header's own minor must be the one its defaults use.
    std::printf("stream-default %d = %d\n", type,
                tcde::AnswersStream(type) == tcde::AnswersStream(type, 2, TORCH_VERSION_MINOR));
    std::printf("memory %d = %s\n", type, Str(tcde::BackendServing(type)));
    for (int32_t id : {0, 3}) {
      c10::Device device(c10::DeviceType::CPU);
      const bool ok = tcde::FromDLDevice(DLDevice{static_cast<DLDeviceType>(type), id}, &device);
      std::printf("import %d %d = %d %s\n", type, id, ok, ok ? device.str().c_str() : "none");
    }
  }
  const struct {
    const char* name;
    c10::DeviceType type;
  } aten[] = {{"cpu", c10::DeviceType::CPU}, {"cuda", c10::DeviceType::CUDA},
              {"hip", c10::DeviceType::HIP}, {"xpu", c10::DeviceType::XPU}};
  for (const auto& entry : aten) {
    const c10::DeviceIndex index = entry.type == c10::DeviceType::CPU ? -1 : 2;
    DLDevice out{kDLCPU, -7};
    const bool ok = tcde::ToDLDevice(c10::Device(entry.type, index), &out);
    const int type = ok ? static_cast<int>(out.device_type) : -1;
    const int id = ok ? static_cast<int>(out.device_id) : -1;
    std::printf("export %s = %d %d %d\n", entry.name, ok, type, id);
  }
  for (int32_t id : {-(1 << 30), -2, -1, 0, 1, 127, 128, 255, 256, 1 << 30}) {
    std::printf("fits %d = %d\n", id, tcde::FitsDeviceIndex(id));
  }
  return 0;
}
"""


@pytest.fixture(scope="module")
def running_torch() -> TorchInstall:
    torch = pytest.importorskip("torch")
    return TorchInstall.from_path(Path(torch.__file__).parent)


def compile_and_run(install: TorchInstall, backend: str, tmp_path: Path) -> dict[str, str]:
    """The answers of tcde_convert.h compiled with TCDE_BACKEND_<backend> against
    ``install``'s headers: ``{question: answer}``."""
    plan = plan_build(BuildRequest(torch=install, backend="cpu", output_dir=tmp_path / "plan"))
    dlpack, _ = find_dlpack_include()
    source = tmp_path / f"convert_{backend}.cc"
    source.write_text(PROGRAM, encoding="utf-8")
    binary = tmp_path / f"convert_{backend}"
    cxx = shutil.which("c++") or "g++"
    command = [
        cxx, f"-std={plan.std}", "-O1", "-Wall", "-Werror=return-type",
        f"-DTCDE_BACKEND_{backend.upper()}", f"-I{dlpack}", f"-I{ROOT / 'csrc'}",
        *(f"-I{path}" for path in install.include_dirs), str(source), "-o", str(binary),
        f"-L{install.lib_dir}", "-lc10", f"-Wl,-rpath,{install.lib_dir}",
    ]  # fmt: skip
    built = subprocess.run(command, capture_output=True, text=True, check=False, timeout=600)
    assert built.returncode == 0, f"{' '.join(command)}\n{built.stderr[-6000:]}"
    ran = subprocess.run([str(binary)], capture_output=True, text=True, check=True, timeout=60)
    answers = {}
    for line in ran.stdout.splitlines():
        question, answer = line.split(" = ")
        answers[question] = answer
    return answers


@pytest.mark.parametrize("backend", ["cpu", "cuda", "rocm"])
def test_the_mapping_follows_the_rules(
    running_torch: TorchInstall, backend: str, tmp_path: Path
) -> None:
    from conformance.tables import (
        FOLLOW,
        answers_gpu_stream,
        gpu_rule,
        serves_gpu_memory,
    )

    answers = compile_and_run(running_torch, backend, tmp_path)
    gpus = {2: "cuda", 10: "rocm"}
    own = {"cpu": None, "cuda": 2, "rocm": 10}[backend]
    for type_ in (-1, 0, 1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 99):
        assert answers[f"stream-default {type_}"] == "1"
        for minor in range(4, 16):
            answered, serving = answers[f"stream {type_} {minor}"].split()
            if type_ in gpus:
                expected = answers_gpu_stream(backend, type_, minor)
                assert answered == str(int(expected)), (backend, type_, minor)
                # A refusal names the build that serves that GPU.
                assert serving == ("none" if expected else gpus[type_]), (backend, type_, minor)
            else:
                # Only GPU streams are ever answered; host and other types are decided
                # elsewhere (exchange_api.cc, CurrentWorkStreamOther).
                assert (answered, serving) == ("0", "none"), (backend, type_, minor)
        # Memory: the same on every minor.
        memory = answers[f"memory {type_}"]
        for device_id in (0, 3):
            imported = answers[f"import {type_} {device_id}"]
            if type_ in gpus:
                if serves_gpu_memory(backend, type_):
                    # torch's "cuda" device: a ROCm torch names its HIP devices so.
                    assert memory == "none"
                    assert imported == f"1 cuda:{device_id}", (backend, type_)
                else:
                    assert memory == gpus[type_], (backend, type_)
                    assert imported == "0 none", (backend, type_)
            elif type_ == 1:
                assert (memory, imported) == ("none", "1 cpu"), backend
            else:
                assert (memory, imported) == ("none", "0 none"), (backend, type_)
    # Export: a "cuda" tensor is its build's GPU, kDLCUDA or kDLROCM; a CPU build exports
    # none (nor "hip" tensors, which only torch's own import of kDLROCM memory makes).
    assert answers["export cpu"] == "1 1 0"
    expected_cuda = "0 -1 -1" if own is None else f"1 {own} 2"
    assert answers["export cuda"] == expected_cuda
    if own is not None:
        assert gpu_rule("export", backend, own, 13).we == FOLLOW
    assert answers["export hip"] == "0 -1 -1"
    assert answers["export xpu"] == "0 -1 -1"
    fits = {int(q.split()[1]): a == "1" for q, a in answers.items() if q.startswith("fits ")}
    assert fits == {id_: -1 <= id_ <= 127 for id_ in fits}
