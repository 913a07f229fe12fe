"""Keeping the interpreter's exit status when gpuprof stops a capture at exit after Ctrl-C.

A script that ends by an unhandled ``KeyboardInterrupt`` exits by SIGINT
(status 130 in a shell) so that whoever ran it knows it was interrupted.
CPython decides this with a flag (``Python/pythonrun.c``,
``run_eval_code_obj``): set when the main module's code ends by
``KeyboardInterrupt``, and cleared again by **every** later evaluation of
source text: ``eval``/``exec`` of a string, which a dataclass, a
``namedtuple`` or an import of ``selectors`` does. gpuprof's exit-time stop
(``atexit``: a ``transformers.Trainer`` has no event for an exception leaving
``train()``, so its capture is stopped there) does all of these, and the
status became 1. :func:`keeping_interrupt_status` wraps such a stop: when the
program is ending by an unhandled ``KeyboardInterrupt`` (``sys.last_exc``/
``sys.last_value``, which the interpreter sets for it before ``atexit``
runs), it sets the flag again as the last thing it does, by evaluating one
line that raises ``KeyboardInterrupt`` and catching it. Elsewhere (another
interpreter, a normal exit) it does nothing.
"""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

__all__ = ["ending_by_interrupt", "keeping_interrupt_status"]


def ending_by_interrupt() -> bool:
    """True at exit when the program's own code ended by an unhandled ``KeyboardInterrupt``."""
    last = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return isinstance(last, KeyboardInterrupt)


@contextmanager
def keeping_interrupt_status() -> Iterator[None]:
    """Run the body, then leave an interrupted program's exit status as Ctrl-C made it (130)."""
    interrupted = ending_by_interrupt()
    try:
        yield
    finally:
        if interrupted:
            _mark_interrupted()


def _mark_interrupted() -> None:
    try:
        # source text, not a code object: only this path sets CPython's flag (see the module docstring)
        exec("raise KeyboardInterrupt", {})  # noqa: S102 - a constant line, to set the interpreter's flag
    except KeyboardInterrupt:
        pass
