"""The floor every room stands on: the developer tools' errors and exit codes
(``errors``), the checkout's root (``paths``: imports nothing), the host's small facts
(``hostenv``), the subprocess steps with their progress lines and where uv is
(``steps``), THE reader of wheel file names (``wheelnames``), GitHub Actions' groups, annotations
and job summary (``ghactions``), the one mechanism for generated sections of committed files
(``generated``: cog blocks, with a check mode) and the one command line with its error
report (``cli``: it imports a command's module by name only when that command runs).

May import: the core and ``build_backend`` only (no other room).
"""
