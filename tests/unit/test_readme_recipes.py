"""The install recipes stay true to the code they describe (issue 21), checked fast:
README's source install (the user's page) and the Quick start's warning against
``pip install dist/*.whl`` (CONTRIBUTING.md, where the Quick start lives);
``tests/integration/test_readme_source_install.py`` and ``test_readme_pip_errors.py``
run them for real."""

from __future__ import annotations

import re
from pathlib import Path

from _torch_c_dlpack_ext_core.installsource import pinned_requirement
from _torch_c_dlpack_ext_core.remedies import BUILD_REQUIREMENTS

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text(encoding="utf-8")
#: The page holding the Quick start (README links it).
CONTRIBUTING = (ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8")


def section(heading: str, page: str = README) -> str:
    """The text of section ``heading`` of ``page`` (README by default), up to the next
    heading."""
    body = page[page.index(heading) + len(heading) :]
    end = re.search(r"^#{2,3} ", body, re.M)
    return body[: end.start()] if end else body


def quick_start() -> str:
    """CONTRIBUTING.md's Quick start."""
    return section("## Quick start", CONTRIBUTING)


def source_recipe() -> list[str]:
    (block,) = re.findall(r"```bash\n(.*?)```", section("### Installing from source"), re.S)
    return [line for line in block.splitlines() if line.strip()]


def test_the_source_recipe_pins_this_version() -> None:
    # Unpinned, pip resolved PyPI's 0.1.5 sdist, which fails to build.
    last = source_recipe()[-1]
    assert last.startswith("pip install --no-build-isolation --no-binary torch-c-dlpack-ext ")
    assert last.split()[-1] == pinned_requirement()


def test_the_source_recipe_installs_the_build_requirements() -> None:
    torch_line = source_recipe()[1]
    for module, requirement in BUILD_REQUIREMENTS.items():
        if module == "tomli":
            assert '"tomli>=1.1"' in section("### Installing from source")
        else:
            assert f'"{requirement}"' in torch_line


def test_the_source_recipe_installs_the_cuda_headers_of_its_torch() -> None:
    lines = source_recipe()
    assert "torch==2.8.0" in lines[1]  # PyPI's Linux torch 2.8.0 is a CUDA 12.8 build
    assert lines[2] == 'pip install "nvidia-cuda-nvcc-cu12==12.8.*"'


def test_the_glob_warning_quotes_what_each_pip_says() -> None:
    text = " ".join(quick_start().split())
    # Checked for real by tests/integration/test_readme_pip_errors.py.
    quoted = dict(QUOTED.findall(text))
    assert quoted["23.0.1 and 23.2.1"].endswith(".whl is not a valid wheel filename")
    assert quoted["26.3"].startswith("Invalid build number: cp39 in '")


#: "pip 23.0.1 and 23.2.1 say `<message>`": the pip versions and what they print.
QUOTED = re.compile(r"pip ((?:[0-9.]+(?: and )?)+) says? `([^`]+)`")
