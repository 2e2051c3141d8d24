"""The release: what ``dist/`` holds (``distfiles``), its contents cell by cell and
the notes (``contents``), a fresh install's diagnosis (``diagnose``), the install check
of every wheel with its torches (``verify``), twine and the publish guard
(``publish``), the release workflow's calls as data (``releaseflow``) and the
workflow's small steps (``cisteps``).

May import: ``base``, ``matrix``, ``envs``, ``build``.
"""
