"""The commands of ``python -m devtools`` (table: :data:`devtools.base.cli.COMMANDS`),
one module each: ``add_arguments(parser)`` declares its options, ``run(args) -> int``
parses what the rooms below should not (paths, comma lists) and calls them. Errors are
left to :mod:`devtools.base.cli`, which reports them once.

May import: every room (``base``, ``matrix``, ``envs``, ``testkit``, ``build``, ``release``,
``rehearse``) and the top level's ``docmap``; nothing imports a command but the command
line, by name.
"""
