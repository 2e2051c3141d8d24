"""The backend's seams are typed: ``config_settings`` is read once, at the hook, into the
frozen options; nothing below the hooks sees the raw mapping."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import build_backend
import pytest
from build_backend import _options, _sdist, _wheel
from build_backend._metadata import project_metadata
from build_backend._options import BackendOptions, read_options
from build_backend._source import ROOT

from _torch_c_dlpack_ext_core.errors import ConfigError

BACKEND = Path(build_backend.__file__).parent


def _names_config_settings(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return any(
        (isinstance(node, ast.arg) and node.arg == "config_settings")
        or (isinstance(node, ast.Name) and node.id == "config_settings")
        for node in ast.walk(tree)
    )


def test_only_the_hooks_and_the_options_reader_see_config_settings() -> None:
    seen = sorted(p.name for p in BACKEND.glob("*.py") if _names_config_settings(p))
    assert seen == ["__init__.py", "_options.py"]


@pytest.mark.parametrize(
    "function", [_wheel.build_wheel_impl, _wheel.build_editable_impl, _wheel.wheel_requirements]
)
def test_the_implementations_take_the_frozen_options(function: object) -> None:
    params = inspect.signature(function).parameters  # type: ignore[arg-type]
    assert "options" in params
    assert params["options"].annotation == "BackendOptions"


def test_the_sdist_implementation_takes_no_settings() -> None:
    assert list(inspect.signature(_sdist.build_sdist_impl).parameters) == ["sdist_directory"]


def test_a_hook_reads_the_settings_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []
    real = _options.hook_options

    def counting(config_settings: _options.ConfigSettings | None) -> BackendOptions:
        calls.append(config_settings)
        return real(config_settings)

    monkeypatch.setattr(_options, "hook_options", counting)
    assert build_backend.get_requires_for_build_wheel({"universal": "true"}) == []
    assert calls == [{"universal": "true"}]


def test_a_list_valued_setting_from_a_frontend_is_read() -> None:
    """PEP 517 passes a key given twice (``-C backends=cpu -C backends=cuda``) as a list."""
    options = read_options(
        pyproject={}, config_settings={"backends": ["cpu", "cuda"]}, environ={}, root=ROOT
    )
    assert options.backends == ("cpu", "cuda")


@pytest.mark.parametrize("tool", ["text", {"torch-c-dlpack-ext": ["a"]}])
def test_a_tool_table_that_is_not_a_table_is_a_config_error(tool: object) -> None:
    with pytest.raises(ConfigError, match=r"\[tool.torch-c-dlpack-ext\] must be a table"):
        read_options(pyproject={"tool": tool}, config_settings=None, environ={}, root=ROOT)


def test_a_project_that_is_not_a_table_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=r"\[project\] must be a table"):
        project_metadata(ROOT, {"project": "torch-c-dlpack-ext"})


def test_toml_table_walks_tables_and_names_the_one_that_is_not() -> None:
    from build_backend._metadata import toml_table

    document: dict[str, object] = {"tool": {"cibuildwheel": {"linux": {"archs": "x86_64"}}}}
    assert toml_table(document, "tool", "cibuildwheel", "linux") == {"archs": "x86_64"}
    assert toml_table(document, "tool", "absent") == {}
    assert toml_table({}, "project") == {}
    with pytest.raises(
        ConfigError, match=r"\[tool\.cibuildwheel\.linux\.archs\] must be a table, not str"
    ):
        toml_table(document, "tool", "cibuildwheel", "linux", "archs")
    with pytest.raises(ConfigError, match=r"\[tool\] must be a table, not list"):
        toml_table({"tool": []}, "tool", "cibuildwheel")
