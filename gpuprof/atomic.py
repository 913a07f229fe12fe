"""Writing files safely: atomically, privately, never through a symlink, never over the input.

Every file gpuprof writes (reports, annotated traces, HTML pages, captured
traces, snapshots, stats) goes through :func:`atomic_path` or
:func:`atomic_write`:

* the data goes to a new temporary file in the target's directory, created
  exclusively (``O_EXCL``) under an unpredictable name by
  :func:`tempfile.mkstemp`, so nobody sharing the directory (a shared logdir)
  can plant a file or a symlink there for gpuprof to write through;
* it is flushed to disk, then :func:`os.replace` moves it over the target in
  one step. A symlink at the target is replaced itself; the file it points to
  is never written;
* on any failure (a full disk, an exception in the writer) the temporary
  file is removed and the previous file at the target is left untouched.

The rename is for regular files only (or a name not taken yet): renaming
over ``/dev/null`` as root replaces the system's null device with a file.
What stands at the target decides (:func:`_target`):

* a regular file, nothing, or a symlink to a regular file or to nothing:
  the atomic replace above (a symlink is replaced itself, never written
  through);
* with ``streams=True`` (an output the user named: ``-o``, ``--html``,
  ``--annotate``): a character device or a FIFO, also behind symlinks
  (``/dev/stdout``, ``/proc/self/fd/1``, ``/dev/null``), is written through:
  opened for writing (no create, no truncate, no rename). A FIFO is opened
  without blocking first, so one with no reader is an error at once, not a
  hang;
* anything else (a block device, a socket, a directory; with ``streams=False``,
  the files gpuprof names itself in a run directory, any device or FIFO) is
  refused with an :class:`OSError` whose message says what it is; the node
  is left as it was.

:func:`refuse_input_as_output` keeps a command from replacing the very file
it reads (``-o trace.json``), whatever path, symlink or hard link names it.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import time
from pathlib import Path
from typing import Iterable, Iterator, Literal

from gpuprof.errors import InputError

__all__ = ["atomic_path", "atomic_write", "write_output", "same_file", "refuse_input_as_output"]

PathLike = str | os.PathLike[str]


_PROC_FD = ("/proc/", "/dev/fd/")  # links through these name an open descriptor (/dev/stdout), not a place


def _target(path: Path, streams: bool) -> Literal["file", "stream"]:
    """How to write ``path``: ``"file"`` (atomic replace) or ``"stream"`` (write through); or raise
    :class:`OSError` for what gpuprof must not touch (module docstring)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "file"
    except OSError:
        return "file"  # unreadable parent and the like: the temporary file's creation reports it
    mode = st.st_mode
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory", os.fspath(path))
    if stat.S_ISLNK(mode):
        try:
            target = os.stat(path).st_mode
        except OSError:
            return "file"  # a dangling link (or a loop): replaced itself
        if streams and (stat.S_ISCHR(target) or stat.S_ISFIFO(target)):
            return "stream"
        if streams and stat.S_ISREG(target) and _through_proc(path):
            return "stream"  # /dev/stdout redirected to a file: append to it, never rename over /dev/stdout
        if stat.S_ISREG(target):
            return "file"  # the link is replaced; the file it points to is never written
        mode = target
    elif streams and (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
        return "stream"
    raise OSError(errno.EINVAL, f"is {_what(mode)}, not a regular file; gpuprof writes "
                  + ("regular files, character devices and pipes" if streams else "regular files here"),
                  os.fspath(path))


def _through_proc(path: Path) -> bool:
    """True when a link on the way from ``path`` goes through ``/proc/`` or ``/dev/fd/`` (an open descriptor)."""
    p = os.path.abspath(path)
    if p.startswith(_PROC_FD):  # -o /proc/self/fd/1 or /dev/fd/1 itself
        return True
    for _ in range(40):  # the kernel's own limit on links followed
        try:
            nxt = os.readlink(p)
        except OSError:
            return False
        p = os.path.join(os.path.dirname(p), nxt)
        if os.path.normpath(p).startswith(_PROC_FD):
            return True
    return False


def _what(mode: int) -> str:
    for test, name in ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory")):
        if test(mode):
            return name
    return "not a regular file"


FIFO_READER_WAIT_S = 2.0  # how long a FIFO output waits for its reader to open it (docs/security.md)


def _open_stream(path: Path) -> int:
    """A descriptor open for writing on the character device or FIFO at ``path`` (through links).

    ``O_NONBLOCK`` first, so that a FIFO with no reader is ``ENXIO`` within ``FIFO_READER_WAIT_S`` (a reader
    started just before may not have opened it yet) rather than a hang, then
    blocking again for the writes; no ``O_CREAT`` (nothing is made), no ``O_TRUNC``, and ``O_APPEND``
    (a file behind ``/dev/stdout`` keeps what the shell wrote before).
    """
    flags = os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    deadline = time.monotonic() + FIFO_READER_WAIT_S
    while True:
        try:
            fd = os.open(path, flags)
            break
        except OSError as err:
            if err.errno != errno.ENXIO:
                raise
            if time.monotonic() >= deadline:  # a reader started just before (`cat fifo &`) had time to open it
                raise OSError(errno.ENXIO, "is a FIFO with no reader (start its reader first)",
                              os.fspath(path)) from None
            time.sleep(0.05)
    try:
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    return fd


def _write_all(fd: int, data: bytes | memoryview) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


@contextlib.contextmanager
def atomic_path(path: PathLike, suffix: str = "", *, streams: bool = False) -> Iterator[Path]:
    """Yield the path of a new, empty, private file beside ``path``; on success it replaces ``path``.

    ``suffix`` ends the temporary name, for writers that pick the format from
    it (torch gzips a trace named ``*.gz``). The name starts with a dot, so
    the trace loader and shell globs skip a file still being written. On any
    error in the block (or while moving the file into place) the temporary
    file is removed and the error propagates; ``path`` is unchanged.

    ``streams``: ``path`` is an output the user named, which may be a character
    device or FIFO (``/dev/stdout``): then the file is made in the temporary
    directory instead and copied into ``path`` on success (module docstring).
    Anything else that is not a regular file raises :class:`OSError` before
    the block runs.
    """
    final = Path(path)
    if _target(final, streams) == "stream":
        with _stream_path(final, suffix) as tmp:
            yield tmp
        return
    # a short prefix from the target's name keeps the temporary name under NAME_MAX
    fd, name = tempfile.mkstemp(suffix=suffix, prefix=f".{final.name[:64]}.", dir=final.parent)
    scratch = Path(name)
    try:
        try:
            # mkstemp makes it 0600; a report should get the mode a plain open() would give it
            os.fchmod(fd, 0o666 & ~_umask())
        finally:
            os.close(fd)
        yield scratch
        _fsync_file(scratch)
        os.replace(scratch, final)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):  # already gone: nothing to clean
            scratch.unlink()
        raise
    _fsync_dir(final.parent)


@contextlib.contextmanager
def _stream_path(final: Path, suffix: str) -> Iterator[Path]:
    """:func:`atomic_path` for a character device or FIFO: opened first (a FIFO with no reader fails before
    any work), the writer's file made privately in the temporary directory, copied in on success."""
    fd = _open_stream(final)
    try:
        tmp_fd, name = tempfile.mkstemp(suffix=suffix, prefix=".gpuprof-out.")
        os.close(tmp_fd)
        scratch = Path(name)
        try:
            yield scratch
            with open(scratch, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    _write_all(fd, chunk)
        finally:
            with contextlib.suppress(FileNotFoundError):
                scratch.unlink()
    finally:
        os.close(fd)


def atomic_write(path: PathLike, data: str | bytes, suffix: str = "", *, streams: bool = False) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` atomically; raises ``OSError`` with ``path`` unchanged.

    ``streams``: as for :func:`atomic_path`; a character device or FIFO is written directly.
    """
    payload = data.encode("utf-8") if isinstance(data, str) else data
    if _target(Path(path), streams) == "stream":
        fd = _open_stream(Path(path))
        try:
            _write_all(fd, payload)
        finally:
            os.close(fd)
        return
    with atomic_path(path, suffix) as tmp, open(tmp, "wb") as fh:
        fh.write(payload)


def write_output(path: PathLike, data: str | bytes, what: str) -> None:
    """:func:`atomic_write` for an output the user named (``-o``, ``--html``): a failure is one
    :class:`InputError` naming ``path``. ``/dev/stdout``, ``/dev/null`` and pipes are written through.

    ``what`` names the output in the message (``"the report"``).
    """
    refuse_directory_name(path, what)
    try:
        atomic_write(path, data, streams=True)
    except IsADirectoryError:
        raise InputError(path, f"cannot write {what}: is a directory") from None
    except OSError as err:
        kept = " (the previous file is unchanged)" if os.path.isfile(path) else ""
        raise InputError(path, f"cannot write {what}: {err.strerror or err}{kept}") from None


def names_a_directory(path: PathLike) -> bool:
    """``out/``: a name that ends in a separator names a directory (a file written there would lose the slash)."""
    text = os.fspath(path)
    return text.endswith(os.sep) or bool(os.altsep and text.endswith(os.altsep))


def refuse_directory_name(path: PathLike, what: str) -> None:
    """Raise :class:`InputError` when an output that is one file is named as a directory (``-o out/``)."""
    if names_a_directory(path):
        raise InputError(path, f"cannot write {what}: the name ends in {os.sep}, a directory; name a file")


def same_file(a: PathLike, b: PathLike) -> bool:
    """True when ``a`` and ``b`` are one file (same device and inode, through symlinks and hard links)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):  # one does not exist (yet), or a name Python cannot pass to the OS
        return False


def refuse_input_as_output(output: PathLike, inputs: Iterable[PathLike], what: str = "output") -> None:
    """Raise :class:`InputError` naming ``output`` when it is the same file as one of ``inputs``.

    Writing there would replace the trace or snapshot being analysed with
    the report about it.
    """
    for src in inputs:
        if same_file(output, src):
            raise InputError(output, f"is the input {os.fspath(src)}; choose another {what} file")


def _umask() -> int:
    """The process umask, read without changing it where Linux allows (other threads may be creating files)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    # elsewhere: set a strict mask for an instant, so a file another thread creates meanwhile is only more private
    old = os.umask(0o077)
    os.umask(old)
    return old


def _fsync_file(path: Path) -> None:
    # reopened by name (the writer may have been torch, with its own handle), never through a link
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable; some filesystems refuse to fsync a directory, and then it is only less durable."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        return  # the file is in place; only durability across a power cut is weaker here
    finally:
        os.close(fd)
