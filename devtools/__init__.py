"""Developer-only tools shared by nox sessions, CI, tests and benchmarks (never shipped).

Run them from the repository root through their one command line, ``python -m devtools
<command>`` (:mod:`devtools.base.cli`; ``--help`` lists the commands), which puts the
checkout's ``python/`` (the shipped building blocks) first on ``sys.path``
(:mod:`devtools.__main__`); imported as a library, they need it importable
(``PYTHONPATH=python``, which the nox sessions and the release workflow set; pytest's
``pythonpath`` does it for the tests). They import ``_torch_c_dlpack_ext_core`` and
``build_backend``, never the package ``torch_c_dlpack_ext`` itself, whose import runs the
selector.

The tools live in rooms, one sub-package per concern, bottom up: ``base``, ``matrix``,
``envs``, ``build``, ``release``, ``rehearse``, then ``commands`` on top. A room imports
only the rooms below it (``tests/unit/test_import_graph.py`` checks it); each room's
``__init__`` says what it owns and imports nothing, so naming a room adds no edge.
"""
