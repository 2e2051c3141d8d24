"""The commands of ``python -m devtools`` (table: :data:`devtools.cli.COMMANDS`), one module
each: ``add_arguments(parser)`` declares its options, ``run(args) -> int`` parses what the
library modules should not (paths, comma lists) and calls them. Errors are left to
:mod:`devtools.cli`, which reports them once."""
