"""``python -m devtools upload`` (``nox -s release``): ``twine check --strict``, then
``twine upload`` of the wheels and the sdist in ``--dist``.

The variants index (``{name}-{version}-variants.json``) goes to ``--variants-dir`` when
given (a directory an index serves), because no upload API takes it yet (PyPI's PEP 825
support is pending). Credentials come only from the environment (``TWINE_USERNAME`` /
``TWINE_PASSWORD``, or Trusted Publishing in CI) and are never printed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from devtools.base.paths import ROOT


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dist", type=Path, default=ROOT / "dist")
    parser.add_argument("--repository-url", help="upload endpoint of the index")
    parser.add_argument("--check-only", action="store_true", help="run twine check only")
    parser.add_argument(
        "--skip-existing", action="store_true", help="skip files the index already has"
    )
    parser.add_argument(
        "--variants-dir", type=Path, help="directory the index serves; gets variants.json"
    )
    parser.add_argument(
        "--no-variant-wheels",
        dest="variant_wheels",
        action="store_false",
        help="leave PEP 825 variant wheels out (indexes that reject their names)",
    )


def run(args: argparse.Namespace) -> int:
    from devtools.release.publish import publish

    publish(
        args.dist,
        repository_url=args.repository_url,
        skip_existing=args.skip_existing,
        variants_dir=args.variants_dir,
        variant_wheels=args.variant_wheels,
        check_only=args.check_only,
    )
    return 0
