"""FrozenRecord: the import path's records behave as frozen dataclasses, built lazily."""

from __future__ import annotations

import copy
import dataclasses
import pickle
from typing import Any, ClassVar

import pytest
from tests.helpers import ROOT, run_python

from _torch_c_dlpack_ext_core.manifest import ManifestEntry
from _torch_c_dlpack_ext_core.naming import Backend
from _torch_c_dlpack_ext_core.record import FrozenRecord
from torch_c_dlpack_ext._loader import LoadedLibrary, Status
from torch_c_dlpack_ext._select import Decision, DecisionKind
from torch_c_dlpack_ext._settings import SettingProblem, Settings
from torch_c_dlpack_ext._torchinfo import TorchInfo

RECORDS: tuple[type[FrozenRecord], ...] = (
    Decision,
    LoadedLibrary,
    ManifestEntry,
    SettingProblem,
    Settings,
    Status,
    TorchInfo,
)


def _twin(cls: type[FrozenRecord]) -> type[Any]:
    """A real ``@dataclass(frozen=True)`` with the record's fields and defaults."""
    specs: list[Any] = []
    for field in dataclasses.fields(cls):  # type: ignore[arg-type]
        if field.default is dataclasses.MISSING:
            specs.append((field.name, Any))
        else:
            specs.append((field.name, Any, dataclasses.field(default=field.default)))
    return dataclasses.make_dataclass(cls.__name__, specs, frozen=True)


def _sample(cls: type[FrozenRecord]) -> dict[str, Any]:
    """Distinct values for every field, so equality and repr see each one."""
    return {name: (index, name) for index, name in enumerate(cls.field_names())}


@pytest.mark.parametrize("cls", RECORDS, ids=lambda c: c.__name__)
def test_record_matches_a_real_frozen_dataclass(cls: type[FrozenRecord]) -> None:
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    assert tuple(f.name for f in fields) == cls.field_names()
    assert list(cls.__annotations__) == list(cls.field_names())
    assert dataclasses.is_dataclass(cls)
    twin = _twin(cls)
    values = _sample(cls)
    record, reference = cls(**values), twin(**values)
    assert repr(record) == repr(reference)
    assert hash(record) == hash(reference)
    assert record == cls(*values.values())
    assert record != cls(**{**values, cls.field_names()[-1]: "other"})
    assert record != reference  # like dataclasses: another class is never equal
    assert dataclasses.asdict(record) == dataclasses.asdict(reference)
    changed = dataclasses.replace(record, **{cls.field_names()[0]: "changed"})  # type: ignore[type-var]
    assert getattr(changed, cls.field_names()[0]) == "changed"
    assert pickle.loads(pickle.dumps(record)) == record
    assert copy.deepcopy(record) == record
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, cls.field_names()[0], "x")
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(record, cls.field_names()[0])


def test_defaults_and_constructor_errors_match_dataclasses() -> None:
    assert Settings() == Settings(disable=False, force=False, library=None)
    assert Status(DecisionKind.DEFER).warnings == ()
    with pytest.raises(TypeError, match="missing 1 required argument"):
        SettingProblem("X")  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        Settings(bogus=True)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="multiple values for argument 'variable'"):
        SettingProblem("X", "m", variable="Y")  # type: ignore[misc]
    with pytest.raises(TypeError, match="takes 2 positional arguments but 3"):
        SettingProblem("X", "m", "extra")  # type: ignore[call-arg]


def test_unsupported_definitions_fail_when_defined() -> None:
    with pytest.raises(TypeError, match="plain default only"):

        class WithFactory(FrozenRecord):
            items: list[int] = dataclasses.field(default_factory=list)

    with pytest.raises(TypeError, match="mutable default list"):

        class WithList(FrozenRecord):
            items: list[int] = []  # noqa: RUF012

    with pytest.raises(TypeError, match="without a default follows one with a default"):

        class WrongOrder(FrozenRecord):
            first: int = 0
            second: int


def test_subclass_and_classvar() -> None:
    class Base(FrozenRecord):
        a: int
        b: int = 2

    class Child(Base):
        kind: ClassVar[str] = "child"
        c: int = 3

    assert Child.field_names() == ("a", "b", "c")
    assert Child(1) == Child(1, 2, 3)
    assert [f.name for f in dataclasses.fields(Child)] == ["a", "b", "c"]  # type: ignore[arg-type]


def test_import_path_builds_no_dataclass_machinery() -> None:
    """The point of FrozenRecord: selecting a library creates records but never runs
    the dataclass decorator (its code generation was most of the load path's cost)."""
    code = """
import os
from _torch_c_dlpack_ext_core import manifest as _manifest
from torch_c_dlpack_ext import _loader, _select, _settings, _torchinfo
from _torch_c_dlpack_ext_core.naming import Backend
records = [_loader.Status, _loader.LoadedLibrary, _manifest.ManifestEntry, _select.Decision,
           _settings.Settings, _settings.SettingProblem, _torchinfo.TorchInfo]
info = _torchinfo.TorchInfo("2.8.0", Backend.CPU, True, None, None, False, False)
settings = _settings.Settings.from_env({"TORCH_C_DLPACK_EXT_DISABEL": "1"})
decision = _select.decide(info, (), settings)
_loader.Status(decision.kind, torch=info, decision=decision, settings=settings)
print(sorted(c.__name__ for c in records if "__dataclass_fields__" in c.__dict__))
"""
    proc = run_python(code, pythonpath=[ROOT / "python"], timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_manifest_entry_json_round_trip_uses_fields() -> None:
    entry = ManifestEntry(
        file="libs/x.so",
        torch="2.8",
        torch_build="2.8.0",
        backend=Backend.CPU,
        cxx11_abi=True,
        dlpack="1.3",
        toolchain="g++",
        gpu_toolkit=None,
        platform="linux_x86_64",
        python="3.11",
        size=1,
        sha256="0" * 64,
    )
    data = entry.to_json()
    assert list(data) == list(ManifestEntry.field_names())
    assert data["backend"] == "cpu"
    assert ManifestEntry.from_json(data) == entry


def test_dataclass_fields_are_built_once_under_concurrent_first_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eight threads asking at once for a fresh record's fields all get the same ones,
    and the dataclass decorator runs once (it refuses a second run on a frozen class).
    The decorator is slowed down so that, without the lock, the threads would overlap."""
    import threading
    import time

    class Fresh(FrozenRecord):
        a: int
        b: str = "b"

    real_dataclass = dataclasses.dataclass
    processed: list[type] = []

    def slow_dataclass(**options: Any) -> Any:
        decorate = real_dataclass(**options)

        def wrapper(cls: type) -> type:
            processed.append(cls)
            time.sleep(0.05)  # releases the GIL: the other threads get to run
            return decorate(cls)

        return wrapper

    monkeypatch.setattr(dataclasses, "dataclass", slow_dataclass)
    barrier = threading.Barrier(8)
    seen: list[tuple[str, ...]] = []
    errors: list[BaseException] = []

    def ask() -> None:
        barrier.wait()
        try:
            seen.append(tuple(f.name for f in dataclasses.fields(Fresh)))  # type: ignore[arg-type]
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert seen == [("a", "b")] * 8
    assert processed == [Fresh]
