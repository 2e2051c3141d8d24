"""The one source of the package version (read by the build backend and the runtime)."""

__version__ = "0.2.0"
