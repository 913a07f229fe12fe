"""Load snapshot pickles without running anything they contain.

A memory snapshot is a pickle, and users receive snapshots from colleagues.
``pickle.load`` on an untrusted file runs arbitrary code: the file can name
any importable callable (``os.system``) and ask for it to be called. PyTorch
snapshots never need that: ``torch.cuda.memory._dump_snapshot`` pickles plain
dicts, lists, tuples, strings, numbers, booleans and None.

:func:`safe_loads` therefore unpickles with a restricted unpickler that
refuses every opcode that reaches outside those built-in containers:

* every global lookup (``GLOBAL``, ``STACK_GLOBAL``, ``INST``, ``EXT1/2/4``
  all go through ``find_class``) is rejected, so no callable or class can be
  named, hence nothing can be called (``REDUCE``, ``NEWOBJ``, ``OBJ`` and
  ``BUILD`` need an object that only ``find_class`` could have produced);
* persistent ids (``PERSID``/``BINPERSID``) are rejected;
* out-of-band buffers (protocol 5) are not supplied, so they fail too.

The rejection is an :class:`UnsafePickleError` naming what the file tried to
import, turned into a one-line :class:`~gpuprof.errors.InputError` by
:func:`load_pickle_file`.
"""

from __future__ import annotations

import contextlib
import io
import os
import pickle
import threading
from typing import Any, Iterator

from gpuprof.errors import InputError
from gpuprof.inputs import Opened, open_input

__all__ = ["UnsafePickleError", "safe_loads", "load_pickle_file", "load_pickle_input"]

# Address space allowed for unpickling, beyond what the process already maps: a
# snapshot's Python objects take 10-30x its pickle; 64x leaves room, 2 GiB at least.
_BUDGET_PER_BYTE = 64
_MIN_BUDGET = 2 << 30


class UnsafePickleError(pickle.UnpicklingError):
    """The pickle asked for something other than plain containers and scalars."""


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that can build only the built-in containers and scalars."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: D401 - pickle API
        raise UnsafePickleError(
            f"refusing to load: the pickle tries to import {module}.{name}, "
            "and a memory snapshot holds only plain data (dicts, lists, strings, numbers)"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePickleError(
            "refusing to load: the pickle uses a persistent id (torch.save format?), "
            "and a memory snapshot holds only plain data"
        )


def safe_loads(data: bytes) -> Any:
    """Unpickle ``data`` allowing only plain containers and scalars.

    Raises :class:`UnsafePickleError` when the pickle tries to import or call
    anything, and :class:`pickle.UnpicklingError` (or ``EOFError``,
    ``ValueError``) when it is malformed.
    """
    return _PlainUnpickler(io.BytesIO(data)).load()


@contextlib.contextmanager
def _address_space_budget(nbytes: int) -> Iterator[None]:
    """Cap the process's address space while an untrusted pickle is unpickled.

    The C unpickler sizes its memo table by the largest memo index it is given
    (``LONG_BINPUT`` takes 4 bytes): a 10-byte pickle can make it allocate and
    zero gigabytes before any check of ours runs. Under this cap such an
    allocation fails with ``MemoryError`` (one line, exit 2) instead. The cap is
    the current size plus a budget in proportion to the pickle. ``setrlimit``
    is process-wide, so it is applied only where gpuprof owns the process's
    only thread (the ``gpuprof memory`` command), never inside a training job.
    """
    try:
        import resource
    except ImportError:  # not on Linux/Unix: no cap
        yield
        return
    if threading.active_count() != 1:
        yield
        return
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        with open("/proc/self/statm", "rb") as fh:
            vm = int(fh.read().split()[0]) * resource.getpagesize()
    except (OSError, ValueError, IndexError):
        yield
        return
    cap = vm + max(_MIN_BUDGET, _BUDGET_PER_BYTE * nbytes)
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    if soft != resource.RLIM_INFINITY and soft <= cap:
        yield  # an existing, tighter cap stays
        return
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def load_pickle_file(path: str | os.PathLike[str]) -> Any:
    """Read ``path`` and :func:`safe_loads` it; any failure is a one-line :class:`InputError`."""
    return load_pickle_input(path)[0]


def load_pickle_input(path: str | os.PathLike[str], opened: Opened | None = None) -> tuple[Any, int]:
    """Read ``path`` (a file, a pipe, ``-`` for standard input; or the already ``opened`` input)
    and :func:`safe_loads` it. Returns the object and the pickle's size in bytes; any failure
    is a one-line :class:`InputError`."""
    if opened is None:
        opened = open_input(path, peek=0)
    try:
        data = opened.stream.read()
    except OSError as err:
        raise InputError.from_os_error(path, err, "read") from None
    finally:
        opened.close()
    try:
        with _address_space_budget(len(data)):
            return safe_loads(data), len(data)
    except UnsafePickleError as err:
        raise InputError(path, str(err)) from None
    except (pickle.UnpicklingError, EOFError, ValueError, IndexError, TypeError, KeyError, AttributeError,
            OverflowError, RecursionError) as err:
        # Malformed pickles surface as any of these from the C unpickler
        # (AttributeError: BUILD on a dict; OverflowError: a huge count).
        raise InputError(path, f"corrupt or truncated pickle ({type(err).__name__}: {str(err)[:200]})") from None
    except MemoryError:
        raise InputError(
            path, f"the pickle asks for more memory than a {len(data):,}-byte snapshot can describe (or than is free)"
        ) from None
