"""The one place the version is written: pyproject.toml reads it from here (hatchling's
``[tool.hatch.version]``), and ``sqljobs.__version__``, ``sqljobs --version`` and the
worker's start-up banner show it."""

__version__ = "0.1.0"
