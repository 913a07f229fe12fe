"""Errors that reach the user as one line, and the exit codes they map to.

Exit codes (documented in the README and ``gpuprof --help``):

* 0: success, no finding at or above the ``--fail-on`` bar;
* 1: success, but findings at or above the bar;
* 2: bad input or usage (missing file, not a trace, corrupt gzip, bad option);
* 3: an internal gpuprof error (a bug: please report it), including a rule
  that raised (:class:`RuleError`): its findings are unknown, so the
  analysis cannot say "no findings".
"""

from __future__ import annotations

import os
from typing import Sequence

from gpuprof.redact import redact, scrub

__all__ = ["EXIT_OK", "EXIT_FINDINGS", "EXIT_BAD_INPUT", "EXIT_INTERNAL", "GpuprofError", "InputError", "RuleError",
           "UsageError", "describe_error"]

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_BAD_INPUT = 2
EXIT_INTERNAL = 3


def describe_error(err: BaseException, limit: int = 200) -> str:
    """``TypeName: message`` on one line, at most ``limit`` characters: an exception named in a note or report."""
    text = " ".join(scrub(f"{type(err).__name__}: {err}").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class GpuprofError(Exception):
    """Base class of errors gpuprof reports to the user without a traceback."""

    exit_code = EXIT_BAD_INPUT


class InputError(GpuprofError):
    """An input file or directory that gpuprof cannot use.

    ``str(err)`` is one line: ``<path>: <problem>``. A URL's credentials are masked in both
    (:mod:`gpuprof.redact`): the error is printed, and may be kept in a report's notes.
    """

    def __init__(self, path: str | os.PathLike[str], problem: str) -> None:
        self.path = redact(os.fspath(path))
        self.problem = " ".join(scrub(str(problem)).split())  # always one line
        super().__init__(f"{self.path}: {self.problem}")

    @classmethod
    def from_os_error(cls, path: str | os.PathLike[str], err: OSError, doing: str = "open") -> "InputError":
        """The error for a file that could not be opened or read (``doing``: what failed, for other errors)."""
        if isinstance(err, FileNotFoundError):
            return cls(path, "no such file")
        if isinstance(err, IsADirectoryError):
            return cls(path, "is a directory")
        if isinstance(err, PermissionError):
            return cls(path, "permission denied")
        return cls(path, f"cannot {doing}: {err.strerror or err}")


class UsageError(GpuprofError):
    """A bad option value or argument (exit 2), raised by the commands' library paths (:mod:`gpuprof.commands`).

    ``param_hint`` names the option (``--option``); ``str(err)`` is then the line click writes for a bad value
    (``Invalid value for --option: ...``). The command line turns it into click's usage error (which adds
    ``(see 'gpuprof CMD --help')``); the MCP server answers ``str(err)``.
    """

    def __init__(self, message: str, param_hint: str | None = None) -> None:
        self.message = message
        self.param_hint = param_hint
        super().__init__(f"Invalid value for {param_hint}: {message}" if param_hint else message)


class RuleError(GpuprofError):
    """One or more rules raised while checking a trace: a gpuprof bug, exit 3.

    ``failures`` holds ``(code, exception)`` pairs in rule order; ``codes``
    the codes alone. ``str(err)`` is one line naming the trace, each failed
    code and the first error. The exceptions keep their tracebacks, which the
    command line prints only under ``GPUPROF_DEBUG=1``.
    """

    exit_code = EXIT_INTERNAL

    def __init__(self, path: str | os.PathLike[str], failures: Sequence[tuple[str, BaseException]]) -> None:
        if not failures:
            raise ValueError("RuleError needs at least one failure")
        self.path = redact(os.fspath(path))
        self.failures = list(failures)
        self.codes = [code for code, _ in self.failures]
        code, first = self.failures[0]
        what = " ".join(scrub(f"{type(first).__name__}: {first}").split())
        if len(what) > 200:
            what = what[:197] + "..."
        rules = "rule " + self.codes[0] if len(self.codes) == 1 else "rules " + ", ".join(self.codes)
        super().__init__(
            f"{self.path}: {rules} failed ({code}: {what}); the analysis is incomplete "
            "(a gpuprof bug; rerun with GPUPROF_DEBUG=1 for the traceback)"
        )
