"""The one subprocess helper (``_torch_c_dlpack_ext_core.run.run``): a failure raises with
the command, exit code and output, unless the caller judges the exit status itself
(``check=False``); a timeout always raises."""

from __future__ import annotations

import sys

import pytest

from _torch_c_dlpack_ext_core.errors import CommandError, CommandTimeoutError
from _torch_c_dlpack_ext_core.run import run

FAIL = [sys.executable, "-c", "import sys; print('out'); sys.exit('bad input')"]
MISSING = ["tcde-no-such-program-anywhere"]


def test_a_failure_raises_with_the_command_and_its_output() -> None:
    with pytest.raises(CommandError) as info:
        run(FAIL, echo=False)
    assert info.value.returncode == 1
    assert info.value.stdout == "out\n"
    assert "bad input" in info.value.stderr
    assert info.value.cmd == FAIL


def test_check_false_returns_a_failure_for_the_caller_to_judge() -> None:
    proc = run(FAIL, echo=False, check=False)
    assert proc.returncode == 1
    assert proc.stdout == "out\n"
    assert "bad input" in proc.stderr


def test_a_missing_program_is_exit_127() -> None:
    with pytest.raises(CommandError) as info:
        run(MISSING, echo=False)
    assert info.value.returncode == 127
    proc = run(MISSING, echo=False, check=False)
    assert (proc.returncode, proc.stdout) == (127, "")
    assert "command not found" in proc.stderr


def test_a_timeout_raises_even_unchecked() -> None:
    sleep = [sys.executable, "-c", "import time; print('started', flush=True); time.sleep(30)"]
    with pytest.raises(CommandTimeoutError) as info:
        run(sleep, echo=False, timeout=1, check=False)
    assert "timed out after 1 s" in info.value.stderr


def test_echo_goes_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    run([sys.executable, "-c", "pass"])
    assert capsys.readouterr().err.startswith(f"+ {sys.executable} -c pass")
    run([sys.executable, "-c", "pass"], echo=False)
    assert capsys.readouterr().err == ""
