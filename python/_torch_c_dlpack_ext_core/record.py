"""Frozen dataclasses that cost next to nothing to define: the import path's records.

``@dataclasses.dataclass(frozen=True)`` writes ``__init__``, ``__repr__``, ``__eq__``,
``__hash__``, ``__setattr__`` and ``__delattr__`` as source text and compiles them
when the class is created, after inspecting every annotation: ~0.7 ms per class,
paid by every ``import torch_c_dlpack_ext`` that loads a library (seven records,
most of that import's cost).

A subclass of :class:`FrozenRecord` behaves as a frozen dataclass: assignment raises
``FrozenInstanceError``, equality, hashing and ``repr`` go by the fields, and
``dataclasses.fields``, ``replace``, ``asdict`` and ``is_dataclass`` work. But its
methods are this module's, compiled once into its bytecode, and the dataclass
machinery runs only when the dataclass API is first used on the class. Type
checkers see a frozen dataclass (PEP 681), so constructor calls are checked
field by field.

Supported: fields with plain, hashable defaults (no ``field(...)``, ``InitVar`` or
``KW_ONLY``), which is all these records need; a subclass that asks for more fails
when it is defined, not later. ``ClassVar`` annotations are not fields.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import TYPE_CHECKING, Any, ClassVar

__all__ = ["FrozenRecord"]

if TYPE_CHECKING:
    from typing_extensions import dataclass_transform
else:

    def dataclass_transform(**_: object) -> Any:
        # Only type checkers read the marker; at runtime it is an identity decorator.
        return lambda cls: cls


_MISSING: Any = dataclasses.MISSING
_FIELDS_LOCK = threading.RLock()
# How dataclasses recognises these markers in string annotations (PEP 563), the only
# kind this project writes.
_CLASSVAR_PREFIXES = ("ClassVar", "typing.ClassVar")
_UNSUPPORTED_PREFIXES = ("InitVar", "dataclasses.InitVar", "KW_ONLY", "dataclasses.KW_ONLY")


def _own_annotations(cls: type) -> dict[str, Any]:
    """The annotations a class body wrote (not its bases'), on every Python."""
    if sys.version_info >= (3, 10):
        # Own annotations only from 3.10 on; from 3.14 (PEP 649) they may not be in
        # the class __dict__ at all.
        return dict(cls.__annotations__)
    # Python 3.9: ``cls.__annotations__`` falls back to a base's; typing_extensions'
    # get_annotations would be a runtime dependency for this one line.
    return dict(cls.__dict__.get("__annotations__", {}))  # noqa: RUF063


class _DataclassFieldsOnDemand:
    """A record's ``__dataclass_fields__``, made by ``dataclasses`` on first access:
    the dataclass API (``fields``, ``replace``, ``asdict``, ``is_dataclass``) reads
    this attribute before anything else, and the import path never does."""

    def __get__(self, instance: object, owner: type) -> dict[str, dataclasses.Field[Any]]:
        if owner is FrozenRecord:
            raise AttributeError("__dataclass_fields__")  # the base is not a dataclass
        # Reentrant: processing a record first asks its base records for their fields.
        # Locked: the decorator refuses to run twice on a class (frozen=True).
        with _FIELDS_LOCK:
            if "__dataclass_fields__" not in owner.__dict__:
                # Generates no methods but the frozen __setattr__/__delattr__ (ours
                # serve); stores the fields in the class's own __dict__, which shadows
                # this descriptor from then on.
                dataclasses.dataclass(init=False, repr=False, eq=False, frozen=True)(owner)
        fields: dict[str, dataclasses.Field[Any]] = owner.__dict__["__dataclass_fields__"]
        return fields


@dataclass_transform(frozen_default=True)
class FrozenRecord:
    """Base class of a frozen record: declare annotated fields, as in a dataclass."""

    #: Field names in declaration order (a base record's first).
    _record_fields: ClassVar[tuple[str, ...]] = ()
    #: Defaults by field name.
    _record_defaults: ClassVar[dict[str, Any]] = {}

    if not TYPE_CHECKING:  # type checkers see records as dataclasses already (PEP 681)
        __dataclass_fields__ = _DataclassFieldsOnDemand()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names = list(cls._record_fields)
        defaults = dict(cls._record_defaults)
        for name, annotation in _own_annotations(cls).items():
            text = annotation if isinstance(annotation, str) else repr(annotation)
            if text.startswith(_CLASSVAR_PREFIXES):
                continue
            default = cls.__dict__.get(name, _MISSING)
            if text.startswith(_UNSUPPORTED_PREFIXES) or isinstance(default, dataclasses.Field):
                raise TypeError(
                    f"{cls.__qualname__}.{name}: a FrozenRecord field takes a plain default "
                    "only (no field(...), InitVar or KW_ONLY)"
                )
            if default is not _MISSING and type(default).__hash__ is None:
                raise TypeError(
                    f"{cls.__qualname__}.{name}: mutable default {type(default).__name__} "
                    "is shared by every instance; use an immutable one (a tuple)"
                )
            if name not in names:
                names.append(name)
            if default is not _MISSING:
                defaults[name] = default
            elif defaults and name not in defaults:
                raise TypeError(
                    f"{cls.__qualname__}.{name}: a field without a default follows one with a "
                    "default"
                )
        cls._record_fields = tuple(names)
        cls._record_defaults = defaults

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        """The fields, in declaration order (``dataclasses.fields`` without the cost of
        building ``Field`` objects on first use)."""
        return cls._record_fields

    # Type checkers use the per-class signature synthesised from the fields (PEP 681).
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        names = self._record_fields
        cls_name = type(self).__qualname__
        if len(args) > len(names):
            raise TypeError(
                f"{cls_name}() takes {len(names)} positional arguments but {len(args)} were given"
            )
        values = dict(zip(names, args))
        for name, value in kwargs.items():
            if name not in names:
                raise TypeError(f"{cls_name}() got an unexpected keyword argument {name!r}")
            if name in values:
                raise TypeError(f"{cls_name}() got multiple values for argument {name!r}")
            values[name] = value
        missing = [n for n in names if n not in values and n not in self._record_defaults]
        if missing:
            raise TypeError(
                f"{cls_name}() missing {len(missing)} required argument(s): "
                + ", ".join(repr(n) for n in missing)
            )
        for name in names:
            value = values[name] if name in values else self._record_defaults[name]
            object.__setattr__(self, name, value)

    def _record_values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._record_fields)

    def __repr__(self) -> str:
        shown = ", ".join(f"{n}={getattr(self, n)!r}" for n in self._record_fields)
        return f"{type(self).__qualname__}({shown})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._record_values() == other._record_values()

    def __hash__(self) -> int:
        return hash(self._record_values())

    def __setattr__(self, name: str, value: object) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")
