"""The driver's checks of a torch installation against what ``csrc/`` assumes: the head of
torch's ``THPVariable`` that ``csrc/tcde_python.h`` declares, per checked torch minor
(:func:`check_tensor_layout`, :data:`THPVARIABLE_HEADS`), and the C++ dual ABI a build
asks for (:func:`check_abi`).
"""

from __future__ import annotations

import re
from pathlib import Path

from .errors import ABIMismatchError, TorchInstallError
from .torchinstall import TorchInstall

__all__ = [
    "LAYOUT_HEADER",
    "THPVARIABLE_HEADS",
    "TORCH_VARIABLE_HEADER",
    "check_abi",
    "check_tensor_layout",
]


#: csrc/ declares the head of torch's ``THPVariable`` itself (``tcde_python.h``); the driver
#: checks the installation's header against it before compiling such sources.
LAYOUT_HEADER = "tcde_python.h"


TORCH_VARIABLE_HEADER = "torch/csrc/autograd/python_variable.h"


#: The head of ``struct THPVariable`` (comments and blanks removed) per torch minor range,
#: read from python_variable.h of PyPI's wheels: 2.4.1, 2.5.1, 2.6.0, 2.7.1, 2.8.0, 2.9.1
#: hold a ``c10::MaybeOwned<at::Tensor>``; 2.10.0, 2.11.0, 2.12.0, 2.12.1, 2.13.0, 2.14.0,
#: 2.14.1 and 2.15.0 the tensor itself. Keep in step with csrc/tcde_python.h.
THPVARIABLE_HEADS: tuple[tuple[tuple[int, int], tuple[int, int], str], ...] = (
    ((2, 4), (2, 9), "PyObject_HEAD c10::MaybeOwned<at::Tensor> cdata;"),
    ((2, 10), (2, 15), "PyObject_HEAD at::Tensor cdata;"),
)


def _thpvariable_head(header: Path) -> str | None:
    """``struct THPVariable``'s members up to ``cdata;``, comments and blanks removed."""
    text = header.read_text(encoding="utf-8", errors="replace")
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    match = re.search(r"\bstruct\s+THPVariable\s*\{(.*?\bcdata\s*;)", text, re.S)
    if match is None:
        return None
    # 2.4.1 spells it ``PyObject_HEAD;`` (an empty declaration), later releases without.
    return " ".join(match.group(1).split()).replace("PyObject_HEAD;", "PyObject_HEAD")


def check_tensor_layout(torch: TorchInstall) -> str:
    """The head of ``THPVariable`` in ``torch``'s headers, if csrc/tcde_python.h declares it.

    Raises :class:`TorchInstallError` naming the checked releases when the torch minor
    is outside the checked range, or when its ``python_variable.h`` declares another head
    than the one checked for that minor (a dev or vendor build that changed it).
    """
    checked = ", ".join(f"{lo[0]}.{lo[1]}-{hi[0]}.{hi[1]}" for lo, hi, _ in THPVARIABLE_HEADS)
    minor = (torch.major, torch.minor)
    expected = next((head for lo, hi, head in THPVARIABLE_HEADS if lo <= minor <= hi), None)
    fix = (
        f"the THPVariable layout csrc/{LAYOUT_HEADER} declares was checked for torch "
        f"{checked} (PyPI's releases); use one of those, or read {TORCH_VARIABLE_HEADER} "
        f"of this torch and extend csrc/{LAYOUT_HEADER} and THPVARIABLE_HEADS in "
        "_torch_c_dlpack_ext_core/torchchecks.py"
    )
    if expected is None:
        raise TorchInstallError(f"torch {torch.version} at {torch.root} is not supported: {fix}")
    header = torch.root / "include" / TORCH_VARIABLE_HEADER
    found = _thpvariable_head(header) if header.is_file() else None
    if found != expected:
        what = f"declares {found!r}" if found else "has no struct THPVariable"
        if not header.is_file():
            what = "is missing"
        raise TorchInstallError(
            f"torch {torch.version} at {torch.root}: {header} {what}, but torch "
            f"{torch.major}.{torch.minor} was checked with {expected!r}; {fix}"
        )
    return expected


def check_abi(install: TorchInstall, cxx11_abi: bool | None, platform: str) -> None:
    if cxx11_abi is None:
        return
    if install.cxx11_abi is None:
        raise ABIMismatchError(
            f"cxx11_abi={int(cxx11_abi)} was requested but the C++ dual ABI does not apply on "
            f"{platform}; leave cxx11_abi unset"
        )
    if cxx11_abi != install.cxx11_abi:
        raise ABIMismatchError(
            f"cxx11_abi={int(cxx11_abi)} was requested but torch {install.version} at "
            f"{install.root} uses _GLIBCXX_USE_CXX11_ABI={int(bool(install.cxx11_abi))}; a library "
            "built with another ABI fails to load. Leave cxx11_abi unset (it is read from the "
            "installation) or point torch at an installation built with the ABI you want"
        )
