"""README says what a JIT build for a CUDA torch needs, with the very packages the
build's own error names (``headers.cuda_header_wheels``): CUDA 12's runtime and nvcc
wheels (``crt/`` is only in the latter), CUDA 13's runtime and crt wheels (checked on
PyPI's 13.5.37 wheels: ``nvidia/cu13/include/cuda_runtime_api.h`` is in
nvidia-cuda-runtime, ``nvidia/cu13/include/crt/host_defines.h`` in nvidia-cuda-crt)."""

from __future__ import annotations

import re
import shlex

from tests.unit.test_readme_recipes import section

from _torch_c_dlpack_ext_core.headers import cuda_header_wheels


def _jit_paragraph() -> str:
    text = section("## Settings")
    start = text.index("A JIT build needs")
    return text[start:]


def test_the_jit_docs_say_what_a_cuda_torch_needs() -> None:
    text = " ".join(_jit_paragraph().split())
    assert "the CUDA headers of torch's CUDA version" in text
    assert "torch.version.cuda" in text
    assert "`CUDA_HOME`, `nvcc` on PATH or `/usr/local/cuda`" in text


def test_the_jit_commands_are_the_builds_own_remedy() -> None:
    (block,) = re.findall(r"```bash\n(.*?)```", _jit_paragraph(), re.S)
    lines = [shlex.split(line) for line in block.splitlines() if line.strip()]
    assert lines == [
        ["pip", "install", *cuda_header_wheels("12.8").split()],
        ["pip", "install", *cuda_header_wheels("13.0").split()],
    ]
