"""The package's version, at the bottom of the pipeline: the tuning cache and saved
files record it, and the CLI prints it."""

__version__ = "0.1.0"
