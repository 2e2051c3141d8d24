"""The test suite's footprint as a record: what each test module and each torch
environment added to the disk and how long it took, per shard run (``pytest --footprint
FILE``, written by ``tests/footprint.py``): the record's types, its schema, and writing and
reading the runs (the committed ones in ``docs/footprint``). Its Markdown tables and the skip
report are :mod:`devtools.testkit.footprinttables`.

A run's disk figures come from two measurements (:mod:`devtools.testkit.diskuse`): the
filesystem's used bytes, sampled every half second for the peak (exact on a filesystem the
run has to itself, as on a CI runner or a rehearsal's loop-mounted image; elsewhere they
include everyone's writes), and the new entries of the caches, each inode counted once.
"""

from __future__ import annotations

import collections.abc
import dataclasses
import json
import types
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path

from devtools.base.errors import ProvisionError
from devtools.base.paths import ROOT

__all__ = [
    "RECORDS",
    "EnvRecord",
    "ModuleRecord",
    "RunRecord",
    "Skip",
    "Wheel",
    "gib",
    "job_records",
    "read_run",
    "read_runs",
    "write_run",
]

#: The record's format; a change that old readers would misread bumps it (2: the skips
#: with their reasons, whether the run was root's, the rehearsed job's whole time).
SCHEMA = 2
GIB = 1 << 30
#: The committed shard runs docs/test-footprint.md's tables are rendered from.
RECORDS = ROOT / "docs" / "footprint"


def gib(size: int) -> str:
    """``size`` bytes in GiB, one decimal."""
    return f"{size / GIB:.1f}"


@dataclasses.dataclass(frozen=True)
class Wheel:
    """An unpacked wheel in uv's cache: ``torch 2.8.0 cp311``, and its bytes."""

    label: str
    size: int


@dataclasses.dataclass(frozen=True)
class EnvRecord:
    """A torch environment (or tree) a run made."""

    name: str
    #: The test module running when it was made.
    module: str
    #: From its creation record; ``None`` where it has none.
    seconds: float | None
    #: ``torch.version.cuda`` of its torch (``None``: a CPU torch or unknown).
    cuda: str | None
    #: ``importable``, ``compile-only``, ``no-deps`` or ``tree``.
    kind: str
    #: What its creation added to uv's cache (made inside the test process; a subprocess's
    #: envs are seen after the fact, their wheels counted in their module's row).
    wheels: tuple[Wheel, ...]
    #: Bytes of its own (not hard links into uv's cache).
    own: int


@dataclasses.dataclass(frozen=True)
class Skip:
    """A skipped test and the reason pytest gave."""

    test: str
    reason: str


@dataclasses.dataclass(frozen=True)
class ModuleRecord:
    """One test module of a run, in run order."""

    module: str
    seconds: float
    outcomes: Mapping[str, int]
    #: The filesystem's used bytes at the module's end minus at its start.
    disk_added: int
    #: The highest used bytes during the module, minus the run's start.
    disk_peak: int
    #: The bytes of the cache entries it made (wheels, envs, CPythons, Debian roots).
    cache_added: int
    new_wheels: tuple[Wheel, ...]
    envs_made: tuple[str, ...]
    envs_used: tuple[str, ...]


@dataclasses.dataclass(frozen=True)
class RunRecord:
    """One run of the suite (a shard, or all of it)."""

    shard: str
    python: str
    platform: str
    started: str
    seconds: float
    #: Whether the caches, the checkout and the temporary files share the sampled
    #: filesystem (else the disk figures miss what lives elsewhere).
    one_filesystem: bool
    filesystem_size: int
    #: The filesystem's used bytes when the tests started (on a rehearsal's own image:
    #: the checkout, the test session's venv, pip's and uv's caches so far).
    disk_start: int
    #: The highest used bytes during the run, and at its end, minus ``disk_start``.
    disk_peak: int
    disk_end: int
    #: Bytes per area at the end, each inode counted once, in this order.
    areas: Mapping[str, int]
    modules: tuple[ModuleRecord, ...]
    envs: tuple[EnvRecord, ...]
    #: Each skipped test with its reason; ``None`` where the run did not record them.
    skips: tuple[Skip, ...] | None = None
    #: Whether the tests ran as root (uid 0).
    as_root: bool = False
    #: Whether this is the job's ``sudo`` step (``pytest -m needs_root``), recorded beside
    #: the runner's step of the same shard.
    root_step: bool = False
    #: The rehearsed CI job's whole time, setup included (``.ci/rehearse-shard``).
    job_seconds: float | None = None

    @property
    def name(self) -> str:
        """The run's name in the tables: the shard, ``+root`` for its root step."""
        return f"{self.shard}+root" if self.root_step else self.shard

    def outcomes(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for module in self.modules:
            for key, count in module.outcomes.items():
                total[key] = total.get(key, 0) + count
        return total


def write_run(path: Path, run: RunRecord) -> None:
    """Write ``run`` as JSON (keys in a fixed order, one module a line), atomically: a
    reader sees the previous record or this one, never half of it."""
    from _torch_c_dlpack_ext_core.files import atomic_write_bytes

    data = {"schema": SCHEMA, **dataclasses.asdict(run)}
    atomic_write_bytes(path, (json.dumps(data, indent=1) + "\n").encode("utf-8"))


def _load_record(kind: type, value: object, where: str) -> object:
    """``value`` (parsed JSON) as the dataclass ``kind``: its fields by their types, no
    unknown keys, the fields without a default present."""
    if not isinstance(value, dict):
        raise ValueError(f"{where} is not an object")
    hints = typing.get_type_hints(kind)
    fields = {f.name: f for f in dataclasses.fields(kind)}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise ValueError(f"{where} has unknown keys {', '.join(map(str, unknown))}")
    missing = [n for n, f in fields.items() if n not in value and f.default is dataclasses.MISSING]
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing)}")
    loaded = {str(name): _load(hints[name], value[name], f"{where}.{name}") for name in value}
    made: object = kind(**loaded)
    return made


#: JSON's scalars as the record's field types read them.
_SCALARS: Mapping[type, tuple[type, ...]] = {
    str: (str,),
    bool: (bool,),
    int: (int,),
    float: (int, float),
}


def _load(kind: object, value: object, where: str) -> object:
    """``value`` (parsed JSON) as the type ``kind`` of a record's field: a dataclass, a
    ``tuple[X, ...]``, a ``Mapping[str, X]``, an optional, ``str``, ``int``, ``float``,
    ``bool``. :class:`ValueError` naming ``where`` on anything else."""
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if isinstance(kind, type) and dataclasses.is_dataclass(kind):
        return _load_record(kind, value, where)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (other,) = [a for a in args if a is not type(None)]
        return _load(other, value, where)
    if origin is tuple and isinstance(value, list):
        return tuple(_load(args[0], item, f"{where}[{i}]") for i, item in enumerate(value))
    if origin is collections.abc.Mapping and isinstance(value, dict):
        return {str(k): _load(args[1], v, f"{where}.{k}") for k, v in value.items()}
    accepted = _SCALARS.get(kind, ()) if isinstance(kind, type) else ()
    if isinstance(value, accepted) and (kind is bool or not isinstance(value, bool)):
        return float(value) if kind is float else value  # type: ignore[arg-type]
    raise ValueError(f"{where} is not of type {getattr(kind, '__name__', kind)}")


def read_run(path: Path) -> RunRecord:
    """The run recorded in ``path`` (a :class:`RunRecord` of schema :data:`SCHEMA`);
    :class:`ProvisionError` if it is not one."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.pop("schema", None) != SCHEMA:
            raise ValueError(f"schema is not {SCHEMA}")
        run = typing.cast("RunRecord", _load(RunRecord, data, "the record"))
    except (OSError, ValueError) as exc:
        raise ProvisionError(f"{path}: not a footprint record of schema {SCHEMA} ({exc})") from None
    return run


def read_runs(folder: Path, order: Sequence[str] = ()) -> list[RunRecord]:
    """Every run recorded in ``folder/*.json``: the shards named in ``order`` first, in
    that order (each shard's runner step before its root step), then the others by name."""
    runs = [read_run(path) for path in sorted(folder.glob("*.json"))]
    rank = {name: i for i, name in enumerate(order)}
    return sorted(runs, key=lambda run: (rank.get(run.shard, len(rank)), run.shard, run.root_step))


def job_records(folder: Path, shard: str) -> list[RunRecord]:
    """The committed records a CI job of ``shard`` is judged by: ``SHARD.json`` (made as
    root before the sudo step existed, it holds the whole shard, the tests marked
    needs_root among them), and ``SHARD+root.json`` where its sudo step has one of its own;
    :class:`ProvisionError` when ``SHARD.json`` is missing."""
    own = folder / f"{shard}.json"
    if not own.is_file():
        raise ProvisionError(
            f"no committed record {own} for the {shard} job: rehearse it "
            "(.ci/rehearse-shard) and commit its record"
        )
    root = folder / f"{shard}+root.json"
    return [read_run(own), *([read_run(root)] if root.is_file() else [])]
