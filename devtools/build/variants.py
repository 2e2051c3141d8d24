"""PEP 825 variant metadata: a cell's properties, its wheel's ``*.dist-info/variant.json``
(written by variantlib, or on Python 3.9 the same document written here) and the
index's ``{name}-{version}-variants.json`` merged from the variant wheels.
"""

from __future__ import annotations

import json
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict, Union

from _torch_c_dlpack_ext_core.errors import BuildError, ConfigError
from _torch_c_dlpack_ext_core.naming import Backend
from devtools.base.paths import ROOT
from devtools.matrix.cells import Cell

__all__ = ["VariantMetadata", "variant_json", "variant_properties", "variants_index"]

#: One label's properties: ``{namespace: {feature: [values]}}``.
VariantProperties = dict[str, dict[str, list[str]]]

#: PEP 825's variant metadata: a variant wheel's ``variant.json`` and the index's
#: ``variants.json`` (keys that are no Python names, hence the call form). A document
#: variantlib wrote, or one read back from a wheel this project assembled, is taken as
#: this shape unchecked (variantlib checks it: ``VariantsJson``, in the unit tests).
VariantMetadata = TypedDict(
    "VariantMetadata",
    {
        "$schema": str,
        "default-priorities": dict[str, list[str]],
        #: A plugin provider (``plugin-api``, ``requires``) or a ``builtin`` one.
        "providers": dict[str, dict[str, Union[str, list[str]]]],
        "variants": dict[str, VariantProperties],
    },
    total=False,
)

ABI_DEPENDENCY = "abi_dependency"


def variant_properties(cell: Cell) -> list[str]:
    """PEP 825 properties of a cell's variant wheel (``namespace :: feature :: value``)."""
    props = [f"abi_dependency :: torch :: {cell.torch.minor}"]
    if cell.backend is Backend.CUDA and cell.toolkit:
        props.append(f"nvidia :: cuda_version_lower_bound :: {cell.toolkit}")
    elif cell.backend is Backend.ROCM and cell.toolkit:
        props.append(f"amd :: rocm_version :: {cell.toolkit}")
    return props


def _variant_info() -> object:
    """pyproject.toml's ``[variant]`` table (providers, priorities), read by variantlib
    (an object only variantlib reads)."""
    from variantlib.pyproject_toml import VariantPyProjectToml

    return VariantPyProjectToml.from_path(ROOT / "pyproject.toml")


def variant_json(cell: Cell) -> bytes:
    """``*.dist-info/variant.json`` of a cell's variant wheel, produced by variantlib
    (which needs Python >= 3.10; on 3.9 :func:`_variant_dist_info_without_variantlib`
    writes the same document, a unit test keeps the two equal)."""
    data: VariantMetadata
    try:
        from variantlib.api import VariantDescription, VariantProperty, make_variant_dist_info
    except ImportError:
        if sys.version_info >= (3, 10):
            raise
        data = _variant_dist_info_without_variantlib(cell)
    else:
        description = VariantDescription(
            properties=[VariantProperty.from_str(p) for p in variant_properties(cell)],
            label=cell.label,
        )
        data = json.loads(make_variant_dist_info(description, variant_info=_variant_info()))
    data = _declare_abi_dependency(data)
    # Canonical form (sorted keys) so equal inputs give byte-identical wheels.
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode()


#: The PEP 825 schema variantlib 0.2 names in the variant metadata it writes.
_VARIANT_SCHEMA = "https://variants-schema.wheelnext.dev/v0.2.0.json"


def _variant_dist_info_without_variantlib(cell: Cell) -> VariantMetadata:
    """What variantlib 0.2's ``make_variant_dist_info`` writes for ``cell``, for
    Python 3.9 where variantlib does not install: the schema, pyproject.toml's
    ``[variant]`` priorities and providers, and the cell's properties under its label."""
    from build_backend._metadata import load_pyproject, toml_table

    document = load_pyproject(ROOT)
    priorities = toml_table(document, "variant", "default-priorities").get("namespace", [])
    providers = toml_table(document, "variant", "providers")
    variants: VariantProperties = {}
    for prop in variant_properties(cell):
        namespace, feature, value = (part.strip() for part in prop.split("::"))
        variants.setdefault(namespace, {}).setdefault(feature, []).append(value)
    return {
        "$schema": _VARIANT_SCHEMA,
        "default-priorities": {"namespace": _strings(priorities, "namespace")},
        "providers": {
            name: {
                "plugin-api": str(provider["plugin-api"]),
                "requires": _strings(provider["requires"], f"{name}.requires"),
            }
            for name in providers
            for provider in [toml_table(providers, name)]
        },
        "variants": {cell.label: variants},
    }


def _strings(value: object, what: str) -> list[str]:
    """``value``, a TOML array of strings, as a list; anything else is a
    :class:`ConfigError` naming ``[variant] what``."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ConfigError(f"pyproject.toml: [variant] {what} must be an array of strings")
    return [str(item) for item in value]


def _declare_abi_dependency(data: VariantMetadata) -> VariantMetadata:
    """Fix up what variantlib 0.2 emits for the ``abi_dependency`` namespace.

    variantlib writes ``abi_dependency :: torch :: X.Y`` into ``variants`` but
    declares no provider for it (its pyproject reader refuses a provider without
    a plugin, and raises on ``builtin`` ones), and its own ``variants.json``
    reader then rejects the file ("providers must list providers for all
    variants"). PEP 850 defines ``abi_dependency`` as an installer-implemented
    provider, so it is declared here as ``builtin`` and ranked last (the torch
    version is a hard constraint, not a preference among GPU builds).
    """
    used = {ns for props in data.get("variants", {}).values() for ns in props}
    if ABI_DEPENDENCY in used:
        namespaces = data.setdefault("default-priorities", {}).setdefault("namespace", [])
        if ABI_DEPENDENCY not in namespaces:
            namespaces.append(ABI_DEPENDENCY)
        data.setdefault("providers", {})[ABI_DEPENDENCY] = {"builtin": ABI_DEPENDENCY}
    return data


def variants_index(wheels: Sequence[Path]) -> VariantMetadata:
    """The ``{name}-{version}-variants.json`` content: every variant.json merged."""
    merged: VariantMetadata = {}
    for path in sorted(wheels):
        with zipfile.ZipFile(path) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/variant.json"))
            data: VariantMetadata = json.loads(archive.read(name))
        if not merged:
            merged = {**data, "variants": {}}
        for label, props in data.get("variants", {}).items():
            known = merged["variants"].get(label)
            if known is not None and known != props:
                raise BuildError(
                    f"variant label {label!r} has different properties in {path.name}: "
                    f"{props} vs {known}"
                )
            merged["variants"][label] = props
        for key, value in data.get("providers", {}).items():
            merged.setdefault("providers", {})[key] = value
    _warn_indistinct(merged.get("variants", {}))
    return merged


def _warn_indistinct(variants: Mapping[str, VariantProperties]) -> None:
    """Say loudly when labels carry the same properties: no PEP 825 namespace expresses
    the C++ ABI, so the CPU variants of a torch minor built with both ABIs (2.6 on
    Linux x86_64) look alike to an installer. The selector still checks the ABI
    before loading (it explains instead of crashing), and plain pip / uv today
    install the combined wheel, which carries both."""
    seen: dict[str, str] = {}
    for label, props in sorted(variants.items()):
        key = json.dumps(props, sort_keys=True)
        if key in seen:
            print(
                f"warning: variant labels {seen[key]!r} and {label!r} declare the same "
                f"properties {key}; an installer cannot tell them apart",
                file=sys.stderr,
            )
        else:
            seen[key] = label
