"""The package version (one place: ``dp_proto.__version__`` and every release manifest read it)."""

__version__ = "0.1.0"
