"""Reading a library's build info from its bytes, before dlopen (issue 21 item 9)."""

from __future__ import annotations

import json
from pathlib import Path

from torch_c_dlpack_ext._library import build_info_in

ROOT = Path(__file__).resolve().parents[2]

INFO = {
    "torch": "2.13.0+cpu",
    "torch_major": 2,
    "torch_minor": 13,
    "backend": "cpu",
    "cxx11_abi": 1,
    "dlpack": "1.3",
    "python": "abi3",
    "toolchain": "g++ 12.2.0",
    "gpu_toolkit": None,
}


def _image(text: str) -> bytes:
    # As a string constant stands in .rodata: NUL-terminated, among other bytes.
    return b"\x7fELF\x02\x01" + b"\x00" * 40 + b"other\x00" + text.encode() + b"\x00tail"


def test_the_constant_is_found_among_other_bytes() -> None:
    assert build_info_in(_image(json.dumps(INFO))) == INFO


def test_no_constant_or_a_broken_one_says_nothing() -> None:
    assert build_info_in(b"\x7fELF" + b"\x00" * 64) == {}
    assert build_info_in(_image('{"torch": "2.8", "torch_major": 2, oops}')) == {}
    # Without its NUL the string is not the constant (a prefix of something else).
    assert build_info_in(json.dumps(INFO).encode()) == {}


def test_csrc_writes_the_form_the_reader_looks_for() -> None:
    """The reader's pattern follows csrc/build_info.cc: the JSON opens with the torch
    build and then torch_major, in json.dumps spacing."""
    source = (ROOT / "csrc" / "build_info.cc").read_text(encoding="utf-8")
    assert '"{\\"torch\\": \\"" TCDE_TORCH_BUILD "\\", \\"torch_major\\": "' in source
    assert json.dumps(INFO).startswith('{"torch": "2.13.0+cpu", "torch_major": ')
