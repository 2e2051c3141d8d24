"""``matrix.toml`` as data: its tables (``tables``: platforms, torch minors and
wheels, free-threaded Pythons, the OS of a ``sys.platform``), the build identities
(``cells``), the derived matrix with its selections and CI's jobs (``model``), a job's
JSON record and its checked readers (``jobs``) and THE reader that validates the file
into them (``reader``).

May import: ``base``.
"""
