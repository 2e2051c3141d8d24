"""The test suite's instrumentation: what a test run cost on disk and in time
(``pytest --footprint``, recorded by ``tests/footprint.py``) as a typed record of one
schema (``footprint``), the disk measurements behind it (``diskuse``: inodes counted
once, the filesystem's use sampled for its peak), and the tables and CI checks rendered
from the committed records (docs/test-footprint.md, a job's skips against its record).

May import: ``base``.
"""
