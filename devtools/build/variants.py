"""PEP 825 variant metadata (PEP 850 providers) of the variant wheels: one variant per
torch minor, its wheel's ``*.dist-info/variant.json``, and the index's
``{name}-{version}-variants.json`` merged from the variant wheels.

The layout (docs/building.md, "Variant wheels"): a variant is a torch minor, label
``t28``, whose one property is ``abi_dependency :: torch :: 2.8``, and its wheel carries
every library of that minor the combined wheel carries (each backend, each C++ ABI) and
the portable table. No installer-checkable property describes torch's *build* (its
backend, its C++ ABI): ``nvidia`` and ``amd`` describe the machine's driver. So only the
runtime selector, which reads the running torch, can choose among those libraries, and a
variant wheel gives it everything the combined wheel would for that minor.

The metadata is written here, not by variantlib: variantlib 0.2 writes a ``$schema`` id
uv 0.13.10 does not know and leaves ``abi_dependency`` without a provider. What is
written is what uv's strict parser accepts (:data:`UV_KEYS`, read from uv 0.13.10's
``variants_json.rs``; checked by :func:`check_metadata`).
"""

from __future__ import annotations

import json
import re
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict, Union

from _torch_c_dlpack_ext_core.errors import BuildError

__all__ = [
    "ABI_DEPENDENCY",
    "SCHEMA",
    "VariantMetadata",
    "check_metadata",
    "emulate_abi_dependency",
    "minor_of_label",
    "variant_json",
    "variant_label",
    "variant_metadata",
    "variant_properties",
    "variants_index",
]

#: One label's properties: ``{namespace: {feature: [values]}}``.
VariantProperties = dict[str, dict[str, list[str]]]

#: PEP 825's variant metadata as PEP 850 extends it: a variant wheel's ``variant.json``
#: and the index's ``variants.json`` (keys that are no Python names, hence the call form).
VariantMetadata = TypedDict(
    "VariantMetadata",
    {
        "$schema": str,
        "default-priorities": dict[str, list[str]],
        #: ``{"builtin": name}``, ``{"static-properties": {...}}`` or a plugin.
        "providers": dict[str, dict[str, Union[str, dict[str, list[str]]]]],
        "variants": dict[str, VariantProperties],
    },
)

#: The PEP 850 draft schema id uv 0.13.10 knows (``PEP_850_SCHEMA``); variantlib 0.2.2
#: writes ``https://variants-schema.wheelnext.dev/v0.2.0.json``, which uv reports as
#: "Unknown variant metadata schema" and ignores.
SCHEMA = "https://variants-schema.wheelnext.dev/peps/850/v0.2.0.json"
#: The namespace whose properties name the torch a variant was built against
#: (``abi_dependency :: torch :: 2.8``: torch==2.8.*), an installer-implemented provider.
ABI_DEPENDENCY = "abi_dependency"

#: The keys uv 0.13.10's parser accepts (it denies unknown fields): the document's, a
#: ``default-priorities`` table's, and each kind of provider's (``optional`` besides).
UV_KEYS = {
    "document": frozenset({"$schema", "default-priorities", "variants", "providers"}),
    "default-priorities": frozenset({"namespace"}),
    "builtin": frozenset({"builtin", "optional"}),
    "static": frozenset({"static-properties", "feature-order", "optional"}),
    "plugin": frozenset({"requires", "plugin-api", "optional"}),
}

_LABEL = re.compile(r"t(?P<major>[0-9])(?P<minor>[0-9]+)")


def variant_label(minor: str) -> str:
    """The label of torch minor ``"2.8"``'s variant: ``t28`` (PEP 825: ``[0-9a-z_.]{1,16}``)."""
    major, _, rest = minor.partition(".")
    if not (major.isdigit() and len(major) == 1 and rest.isdigit()):
        raise BuildError(f"torch minor {minor!r} is not major.minor (such as 2.8)")
    return f"t{major}{rest}"


def minor_of_label(label: str) -> str:
    """The torch minor of a variant label: ``t28`` -> ``"2.8"``; anything else (an old
    per-cell label such as ``t28_cpu``) is a :class:`BuildError`."""
    match = _LABEL.fullmatch(label)
    if match is None:
        raise BuildError(
            f"variant label {label!r} is not a torch minor's (t<major><minor>, such as t28)"
        )
    return f"{match['major']}.{match['minor']}"


def variant_properties(minor: str) -> list[str]:
    """PEP 825 properties of torch minor ``minor``'s variant: its torch only."""
    return [f"{ABI_DEPENDENCY} :: torch :: {minor}"]


def variant_metadata(minors: Sequence[str]) -> VariantMetadata:
    """The metadata listing the variants of ``minors`` (one for a wheel's ``variant.json``,
    all of a release's for the index)."""
    return {
        "$schema": SCHEMA,
        "default-priorities": {"namespace": [ABI_DEPENDENCY]},
        "providers": {ABI_DEPENDENCY: {"builtin": ABI_DEPENDENCY}},
        "variants": {
            variant_label(minor): {ABI_DEPENDENCY: {"torch": [minor]}}
            for minor in sorted(set(minors))
        },
    }


def variant_json(minor: str) -> bytes:
    """``*.dist-info/variant.json`` of torch minor ``minor``'s variant wheel, in canonical
    form (sorted keys) so equal inputs give byte-identical wheels."""
    return _dump(variant_metadata([minor]))


def _dump(data: VariantMetadata) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


def check_metadata(data: object, where: str) -> VariantMetadata:
    """``data`` (parsed JSON) as variant metadata uv 0.13.10 reads without complaint, or a
    :class:`BuildError` naming ``where`` and the fault: the PEP 850 schema id, only the
    keys uv accepts, a provider for exactly the namespaces ``default-priorities`` ranks,
    and no ``null`` variant (its fallback role belongs to the combined wheel)."""
    if not isinstance(data, dict):
        raise BuildError(f"{where}: variant metadata must be a JSON object")
    if data.get("$schema") != SCHEMA:
        raise BuildError(f"{where}: $schema is {data.get('$schema')!r}, not {SCHEMA!r}")
    _only(data, UV_KEYS["document"], where)
    priorities = data.get("default-priorities")
    if not isinstance(priorities, dict):
        raise BuildError(f"{where}: default-priorities must be an object")
    _only(priorities, UV_KEYS["default-priorities"], f"{where}: default-priorities")
    namespaces = priorities.get("namespace")
    if (
        not isinstance(namespaces, list)
        or not namespaces
        or len(set(namespaces)) != len(namespaces)
    ):
        raise BuildError(f"{where}: default-priorities.namespace must be unique names")
    _check_providers(data.get("providers"), namespaces, where)
    _check_variants(data.get("variants"), namespaces, where)
    checked: VariantMetadata = data  # type: ignore[assignment]  # checked above
    return checked


def _check_providers(providers: object, namespaces: list[str], where: str) -> None:
    """A provider for exactly the ranked namespaces, each of a kind uv knows, with only
    that kind's keys."""
    if not isinstance(providers, dict) or set(providers) != set(namespaces):
        raise BuildError(
            f"{where}: providers must be declared for exactly {sorted(namespaces)}, "
            f"found {sorted(providers) if isinstance(providers, dict) else providers!r}"
        )
    for name, provider in providers.items():
        if not isinstance(provider, dict):
            raise BuildError(f"{where}: provider {name} must be an object")
        kind = (
            "builtin"
            if "builtin" in provider
            else "static"
            if "static-properties" in provider
            else "plugin"
        )
        _only(provider, UV_KEYS[kind], f"{where}: provider {name}")


def _check_variants(variants: object, namespaces: list[str], where: str) -> None:
    """At least one label, no ``null``, every namespace ranked, string values."""
    if not isinstance(variants, dict) or not variants:
        raise BuildError(f"{where}: variants must list at least one label")
    if "null" in variants:
        raise BuildError(f"{where}: a null variant would beat the combined wheel everywhere")
    for label, props in variants.items():
        if not isinstance(props, dict):
            raise BuildError(f"{where}: variant {label} must map namespaces to features")
        for namespace, features in props.items():
            if namespace not in namespaces:
                raise BuildError(f"{where}: {label} uses {namespace}, which has no priority")
            if not isinstance(features, dict) or not all(
                isinstance(v, list) and v and all(isinstance(x, str) for x in v)
                for v in features.values()
            ):
                raise BuildError(f"{where}: {label}'s {namespace} features need string values")


def _only(table: Mapping[str, object], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise BuildError(
            f"{where}: {', '.join(unknown)} not accepted by uv's variant metadata parser "
            f"(allowed: {', '.join(sorted(allowed))})"
        )


def emulate_abi_dependency(data: VariantMetadata, minor: str) -> VariantMetadata:
    """``data`` as an installer that applies ``abi_dependency`` sees it for a user whose
    torch is minor ``minor``: the builtin provider rewritten as a static list of that
    minor (how the tests and the rehearsal stand in for a uv that implements it; uv
    0.13.10 ranks static providers as PEP 850 says)."""
    emulated: VariantMetadata = json.loads(_dump(data))
    emulated["providers"][ABI_DEPENDENCY] = {"static-properties": {"torch": [minor]}}
    return emulated


def variants_index(wheels: Sequence[Path]) -> VariantMetadata:
    """The ``{name}-{version}-variants.json`` content: every variant.json merged (one
    label, one set of properties: the abi3 and free-threaded wheels of a minor share it)."""
    merged: VariantMetadata | None = None
    for path in sorted(wheels):
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/variant.json"))
            data = check_metadata(json.loads(archive.read(name)), f"{path.name}: {name}")
        if merged is None:
            merged = {**data, "variants": {}}
        for label, props in data["variants"].items():
            known = merged["variants"].get(label)
            if known is not None and known != props:
                raise BuildError(
                    f"variant label {label!r} has different properties in {path.name}: "
                    f"{props} vs {known}"
                )
            merged["variants"][label] = props
        if data["providers"] != merged["providers"]:
            raise BuildError(f"{path.name}: its providers differ from the other variant wheels'")
    if merged is None:
        raise BuildError("no variant wheels to index")
    return check_metadata(merged, "the variants index")
