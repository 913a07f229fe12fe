"""gpuprof's version, in a module of its own so that any module can read it without importing the package root.

The one place it is written: pyproject.toml reads it from here (``dynamic = ["version"]``).
"""

__version__ = "0.1.0"
