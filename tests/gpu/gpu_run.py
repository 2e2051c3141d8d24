"""The GPU check in one command, for the offline GPU machine (docs/gpu-check.md)::

    python tests/gpu/gpu_run.py --out DIR [--require-gpu] [--carry .gpu-carry]

Run from the checkout with the machine's own Python and torch, after the carried wheels are
installed (``python -m devtools gpu-carry`` prints the whole line). Each step is timed, its
output goes to ``DIR/logs/<step>.log``, and a step that fails does not stop the others:

1. ``build``: our native libraries for the running torch (CPU, and CUDA on a CUDA torch) and
   the portable table, through the build driver, into ``<work>/libs`` (where the steps
   below find them: an unchanged rebuild is a no-op);
2. ``check``: ``gpu_check.py``, ours against torch's own table (``DIR/check.json``);
3. ``tvm-ffi native`` and 4. ``tvm-ffi portable``: apache-tvm-ffi's own GPU tests
   (``devtools.envs.gpu_carry.TVM_FFI_TESTS``, unpacked from the carried sdist) with our
   native library forced (``FORCE=1``, ``LIBRARY``), then the portable table (``PORTABLE=1``,
   ``LIBRARY``), under ``forced_table.py``, which proves the table was ours from the first
   test to the last (``DIR/tvm-ffi-<table>.xml``, ``.table.json``, each test file's time:
   two compile inline extensions with ninja);
5. ``bench``: ``python -m benchmarks --device cuda`` (``--dry-run`` where no GPU is):
   every member of the three tables on CUDA tensors, and the Python path
   (``DIR/bench/exchange-cuda.json``);
6. ``pytest tests/gpu``.

Then ``DIR/run.json`` and ``DIR/run.md`` hold one row per step (result, seconds, summary),
also printed. Steps share ``--deadline`` seconds (default 540: the device runs a command
for at most 10 minutes): a step still running then is stopped, the rest say "not run", and
the report is still written. Exit status: 0 when every step passed, 1 when one failed, 2
under ``--require-gpu`` where no GPU was seen.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT / "python", ROOT):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from benchmarks.gpu import KIND, TABLES, build_native, build_portable  # noqa: E402
from devtools.envs.gpu_carry import (  # noqa: E402
    CARRY_DIR,
    TVM_FFI_TESTS,
    extract_consumer_tests,
)

from _torch_c_dlpack_ext_core.naming import DEV_ENV_PREFIX, Backend  # noqa: E402

OK, FAILED, NOT_RUN, TIMED_OUT = "ok", "FAILED", "not run", "timed out"
#: Set for the steps' own pytest runs: tests/gpu/test_gpu_run.py then skips (no run in a run).
INSIDE = DEV_ENV_PREFIX + "GPU_RUN"
#: The carried files' folder when --carry is not given (else <checkout>/.gpu-carry).
CARRY_VAR = DEV_ENV_PREFIX + "GPU_CARRY"
EXIT_FAILED, EXIT_NO_GPU = 1, 2
STEPS = ("build", "check", "tvm-ffi native", "tvm-ffi portable", "bench", "pytest tests/gpu")
#: What the run asks of the running torch, in a child (the parent initialises no CUDA).
PROBE = """
import json, torch
gpu = torch.cuda.is_available()
print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda,
    "hip": getattr(torch.version, "hip", None), "gpu": gpu,
    "devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    if gpu else []}))
"""


@dataclasses.dataclass
class Step:
    name: str
    result: str = NOT_RUN
    seconds: float = 0.0
    summary: str = ""
    details: dict[str, Any] = dataclasses.field(default_factory=dict)


class Run:
    """The steps' shared folders, deadline and report."""

    def __init__(self, out: Path, work: Path, deadline: float, skip: list[str]) -> None:
        self.out, self.work, self.libs = out, work, work / "libs"
        self.logs = out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.ends = time.monotonic() + deadline
        self.skip = skip
        self.steps: list[Step] = []

    def log_of(self, step: Step) -> Path:
        return self.logs / ("".join(c if c.isalnum() else "-" for c in step.name) + ".log")

    def left(self) -> float:
        return self.ends - time.monotonic()

    def step(self, name: str, body: Callable[[Step], None]) -> Step:
        """Run ``body`` as step ``name`` (not at all once the deadline passed)."""
        step = Step(name)
        self.steps.append(step)
        if name in self.skip:
            step.summary = "--skip"
            return step
        if self.left() <= 5:
            step.summary = "out of time (--deadline)"
            return step
        print(f"gpu_run: {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            body(step)
        except Exception as exc:  # a step's crash is its result, recorded with the cause
            step.result, step.summary = FAILED, f"{type(exc).__name__}: {exc}"[-600:]
        step.seconds = round(time.monotonic() - started, 1)
        print(f"gpu_run: {name}: {step.result} in {step.seconds} s", file=sys.stderr, flush=True)
        return step

    def command(
        self, step: Step, argv: list[str], *, env: dict[str, str], cwd: Path = ROOT
    ) -> int | None:
        """Run ``argv``, its output to the step's log; the exit status, or None (and the
        step timed out) when the deadline came first."""
        log = self.log_of(step)
        step.details.setdefault("commands", []).append(argv)
        with log.open("a", encoding="utf-8") as sink:
            sink.write(f"$ {' '.join(argv)}\n")
            sink.flush()
            proc = subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
            try:
                return proc.wait(timeout=max(1.0, self.left()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                step.result, step.summary = TIMED_OUT, f"stopped at the deadline; see {log}"
                return None


def base_env(**extra: str) -> dict[str, str]:
    """This environment without the package's variables, the checkout first on the path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TORCH_C_DLPACK_EXT_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), str(ROOT)])
    env.update(extra)
    return env


def junit_summary(path: Path) -> tuple[dict[str, int], dict[str, float]]:
    """(counts of passed, failed, errors, skipped; seconds per test file) of a JUnit file."""
    counts = dict.fromkeys(("passed", "failed", "errors", "skipped"), 0)
    files: dict[str, float] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome = next(
            ({"failure": "failed", "error": "errors", "skipped": "skipped"}[c.tag]
             for c in case if c.tag in ("failure", "error", "skipped")),
            "passed",
        )  # fmt: skip
        counts[outcome] += 1
        module = case.get("classname", "").split(".")[0] or "?"
        files[module] = round(files.get(module, 0.0) + float(case.get("time", 0.0)), 1)
    return counts, files


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {what}" for what, n in counts.items() if n) or "nothing ran"


def build_step(run: Run, torch_info: dict[str, Any]) -> Callable[[Step], None]:
    def body(step: Step) -> None:
        backends = [Backend.CPU] + ([Backend.CUDA] if torch_info.get("cuda") else [])
        with run.log_of(step).open("w", encoding="utf-8") as sink, contextlib.redirect_stderr(sink):
            for backend in backends:
                path, said = build_native(run.libs, backend)
                step.details[backend.value] = str(path)
                step.summary += f"{backend.value}: {said}; "
            path, said = build_portable(run.libs)
            step.details["portable"] = str(path)
            step.summary += f"portable: {said}"
        step.result = OK

    return body


def check_step(run: Run, require_gpu: bool) -> Callable[[Step], None]:
    def body(step: Step) -> None:
        argv = [sys.executable, str(ROOT / "tests" / "gpu" / "gpu_check.py"),
                "--cache-dir", str(run.libs), "--json", str(run.out / "check.json")]  # fmt: skip
        code = run.command(step, argv + (["--require-gpu"] if require_gpu else []), env=base_env())
        if code is None:
            return
        log = run.log_of(step).read_text(encoding="utf-8").splitlines()
        step.summary = next((line for line in reversed(log) if " mismatch, " in line), "")
        step.result = OK if code == 0 else FAILED
        step.details["exit"] = code

    return body


def consumer_step(run: Run, table: str, build: Step, carry: Path) -> Callable[[Step], None]:
    """apache-tvm-ffi's tests with our ``table`` (``native`` or ``portable``) forced in."""

    def body(step: Step) -> None:
        tests = run.work / "tvm-ffi-tests"
        if not (tests / TVM_FFI_TESTS[0]).is_file():
            extract_consumer_tests(carry, tests)
            (tests / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
        native = build.details.get("cuda") or build.details.get("cpu")
        library = build.details.get("portable") if table == "portable" else native
        if library is None:
            step.summary = "no library was built"
            return
        settings = {"TORCH_C_DLPACK_EXT_LIBRARY": library}
        if table == "portable":
            settings["TORCH_C_DLPACK_EXT_PORTABLE"] = "1"
        else:
            settings["TORCH_C_DLPACK_EXT_FORCE"] = "1"
            if not build.details.get("cuda") and build.details.get("cuda_torch"):
                settings["TORCH_C_DLPACK_EXT_BACKEND"] = "cpu"
        name = f"tvm-ffi-{table}"
        env = base_env(
            **settings,
            TVM_FFI_CACHE_DIR=str(run.work / "tvm-ffi-cache"),
            TORCH_EXTENSIONS_DIR=str(run.work / "torch-extensions"),
            TCDE_GPU_EXPECT="portable" if table == "portable" else "load",
            TCDE_GPU_TABLE_REPORT=str(run.out / f"{name}.table.json"),
        )
        argv = [sys.executable, "-m", "pytest", "-p", "tests.gpu.forced_table",
                "-p", "no:cacheprovider", "-c", str(tests / "pytest.ini"), "--rootdir",
                str(tests), "-q", "-rs", "--junitxml", str(run.out / f"{name}.xml"),
                *TVM_FFI_TESTS]  # fmt: skip
        code = run.command(step, argv, env=env, cwd=tests)
        if code is None:
            return
        table_report = run.out / f"{name}.table.json"
        forced = json.loads(table_report.read_text()) if table_report.is_file() else {}
        counts, files = ({}, {})
        if (run.out / f"{name}.xml").is_file():
            counts, files = junit_summary(run.out / f"{name}.xml")
        ours = bool(forced.get("published_is_ours")) and bool(forced.get("still_published_at_end"))
        step.details.update(exit=code, counts=counts, seconds_per_file=files, table=forced)
        step.summary = (
            f"{_counts_text(counts)}; {forced.get('kind', '?')} of {Path(library).name}, "
            f"{'ours from the first test to the last' if ours else 'NOT ours throughout'}; "
            + ", ".join(f"{f} {s} s" for f, s in sorted(files.items(), key=lambda i: -i[1])[:3])
        )
        step.result = OK if code == 0 and ours and not counts.get("failed") else FAILED

    return body


def bench_step(run: Run, gpu: bool) -> Callable[[Step], None]:
    def body(step: Step) -> None:
        results = run.out / "bench"
        argv = [sys.executable, "-m", "benchmarks", "--device", "cuda", "--work-dir",
                str(run.work), "--results-dir", str(results)]  # fmt: skip
        if not gpu:
            argv.append("--dry-run")
        code = run.command(step, argv, env=base_env())
        if code is None:
            return
        step.result = OK if code == 0 else FAILED
        document = results / f"{KIND}.json"
        if code == 0 and document.is_file():
            data = json.loads(document.read_text())["data"]
            medians = {
                table: {m: round(s["median"]) for m, s in data["providers"][table].items()}
                for table in TABLES
                if table in data["providers"]
            }
            step.details["medians_ns"] = medians
            step.summary = (
                ("dry run (CPU tensors); " if data["dry_run"] else "")
                + "; ".join(
                    f"{m}: " + " / ".join(str(medians[t].get(m, "-")) for t in medians)
                    for m in ("from_py_object", "allocator", "current_work_stream")
                )
                + f" ns ({' / '.join(medians)})"
            )

    return body


def pytest_step(run: Run) -> Callable[[Step], None]:
    def body(step: Step) -> None:
        xml = run.out / "pytest-gpu.xml"
        argv = [sys.executable, "-m", "pytest", "tests/gpu", "-q", "-rs", "-p",
                "no:cacheprovider", "--junitxml", str(xml)]  # fmt: skip
        env = base_env(**{INSIDE: "1", "TCDE_TEST_BUILD_CACHE": str(run.work)})
        code = run.command(step, argv, env=env)
        if code is None:
            return
        counts = junit_summary(xml)[0] if xml.is_file() else {}
        step.summary, step.result = _counts_text(counts), OK if code == 0 else FAILED
        step.details.update(exit=code, counts=counts)

    return body


def report(run: Run, torch_info: dict[str, Any]) -> str:
    rows = [(s.name, s.result, f"{s.seconds:.1f}", s.summary) for s in run.steps]
    lines = [
        f"GPU check: torch {torch_info.get('torch')}, Python {sys.version.split()[0]}, "
        f"GPUs: {', '.join(torch_info.get('devices', [])) or 'none'}",
        "",
        "| step | result | seconds | summary |",
        "|---|---|---:|---|",
        *(f"| {' | '.join(row)} |" for row in rows),
        "",
        f"total {sum(s.seconds for s in run.steps):.1f} s",
    ]
    document = {"torch": torch_info, "steps": [dataclasses.asdict(s) for s in run.steps]}
    (run.out / "run.json").write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    text = "\n".join(lines) + "\n"
    (run.out / "run.md").write_text(text, encoding="utf-8")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", type=Path, required=True, help="where the results go")
    parser.add_argument("--require-gpu", action="store_true", help="exit 2 if no GPU is seen")
    parser.add_argument(
        "--carry",
        type=Path,
        default=Path(os.environ.get(CARRY_VAR) or ROOT / CARRY_DIR),
        help=f"the carried files (default: ${CARRY_VAR}, else <checkout>/{CARRY_DIR})",
    )
    parser.add_argument("--work-dir", type=Path, default=None, help="builds (default: a temp dir)")
    parser.add_argument("--deadline", type=float, default=540.0, help="seconds for all steps")
    parser.add_argument(
        "--skip", action="append", default=[], choices=STEPS, help="leave this step out"
    )
    args = parser.parse_args(argv)
    out = args.out.resolve()
    with contextlib.ExitStack() as stack:
        work = args.work_dir or Path(stack.enter_context(tempfile.TemporaryDirectory()))
        run = Run(out, work.resolve(), args.deadline, args.skip)
        probe = subprocess.run(
            [sys.executable, "-c", PROBE], env=base_env(), capture_output=True, text=True,
            timeout=300, check=False,
        )  # fmt: skip
        if probe.returncode != 0:
            print(f"gpu_run: torch does not import: {probe.stderr[-2000:]}", file=sys.stderr)
            return EXIT_FAILED
        torch_info = json.loads(probe.stdout.strip().splitlines()[-1])
        gpu = bool(torch_info["gpu"])
        build = run.step("build", build_step(run, torch_info))
        build.details["cuda_torch"] = bool(torch_info.get("cuda") or torch_info.get("hip"))
        run.step("check", check_step(run, args.require_gpu))
        run.step("tvm-ffi native", consumer_step(run, "native", build, args.carry))
        run.step("tvm-ffi portable", consumer_step(run, "portable", build, args.carry))
        run.step("bench", bench_step(run, gpu))
        run.step("pytest tests/gpu", pytest_step(run))
        print(report(run, torch_info))
    if args.require_gpu and not gpu:
        print("gpu_run: --require-gpu: torch sees no GPU", file=sys.stderr)
        return EXIT_NO_GPU
    # A step left out by --skip is the only one allowed not to pass.
    failed = [s.name for s in run.steps if s.result != OK and s.summary != "--skip"]
    return EXIT_FAILED if failed else 0


if __name__ == "__main__":
    sys.exit(main())
