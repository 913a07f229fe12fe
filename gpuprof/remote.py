"""Inputs named by URL (``s3://``, ``gs://``, ``az://``, ``hdfs://``, ``memory://``...), read through fsspec.

A big job's traces usually sit in object storage next to its checkpoints.
gpuprof reads them where they are: a URL is opened with fsspec and streamed
front to back like a local file (gzip included, told apart by its first
bytes), never downloaded whole first. A URL may be a glob
(``s3://bucket/run/*/rank*.pt.trace.json.gz``) or a "directory" prefix.

fsspec and each protocol's package (``s3fs``, ``gcsfs``, ``adlfs``...) are
optional: a missing one is a one-line :class:`~gpuprof.errors.InputError`
naming the package to install. Credentials are whatever fsspec's backends
take (environment, config files, instance metadata); gpuprof has no
argument for them and never prints one: a URL's ``user:password@`` part and
secret query values are masked wherever a URL is shown (:func:`gpuprof.redact.redact`;
the name a trace gets in a report is made masked, and every error line is scrubbed).

Listing a prefix or a glob is one listing of the store (no per-object
metadata request) and at most :data:`MAX_URL_MATCHES` files; a filesystem
bound to one host (``ftp://``, ``sftp://``, ``smb://``) gets back URLs that
name that host (and its login) again, so that each file can be opened
alone, on a Dask worker too.

``file://`` URLs are local paths: they are turned into :class:`pathlib.Path`
and get the local reader with all its checks (no symlink surprises, FIFOs,
limits) rather than a second code path.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, BinaryIO, Callable, Union
from urllib.parse import unquote, urlsplit

from gpuprof.errors import InputError, describe_error
from gpuprof.limits import Limit
from gpuprof.redact import redact

__all__ = ["Url", "TraceFile", "MAX_URL_MATCHES", "is_url", "local_or_url", "find_remote", "open_remote", "modified_time", "redact"]

# scheme "://" (RFC 3986 scheme characters); a Windows drive ("C:\\") has no "//" and is not one
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_GLOB_CHARS = ("*", "?", "[")
# A job has a trace per rank: tens of thousands at the most. A glob over a whole bucket by mistake would
# make a list of millions of names (and then open them), so the matches are capped (docs/limits.md).
MAX_URL_MATCHES = Limit("GPUPROF_MAX_URL_MATCHES", 100_000, "the most files a URL glob or prefix may name")

def _backend_errors() -> tuple[type[BaseException], ...]:
    """What fsspec's backends raise for a store that refuses or fails: OSError subclasses mostly, but
    ftplib's own errors ("530 Login incorrect") and EOFError (a server that hangs up) are not OSErrors.
    A function, evaluated only when an exception is matched: ftplib (socket, ssl) is not imported by
    the command line's start (``gpuprof --help``, a local trace)."""
    import ftplib

    return (OSError, EOFError, ftplib.Error)


class Url(str):
    """A remote input's URL: a ``str`` (so it prints and pickles as itself) with a file-like ``name``.

    Deliberately not a :class:`os.PathLike`: ``Path(url)`` would fold ``//``
    and ``open(url)`` would look for a local file, so code that meets a
    ``Url`` must ask :func:`open_remote` for it, and anything that does not
    fails loudly rather than reading the wrong file.
    """

    __slots__ = ()

    @property
    def name(self) -> str:
        return self.rstrip("/").rsplit("/", 1)[-1]


# What the analysis takes as one trace file: a local path or a URL.
TraceFile = Union[Path, Url]


def is_url(path: object) -> bool:
    """True for ``scheme://...`` strings (and :class:`Url`); False for local paths and ``-``."""
    return isinstance(path, str) and _URL.match(path) is not None


def local_or_url(path: str | os.PathLike[str]) -> TraceFile:
    """A local path as :class:`Path` (``file://`` URLs included), any other URL as :class:`Url`."""
    if isinstance(path, Url):
        return path
    if isinstance(path, str) and is_url(path):
        if path[:7].lower() == "file://":
            parts = urlsplit(path)
            if parts.netloc not in ("", "localhost"):
                raise InputError(path, "a file:// URL must name this machine (file:///path)")
            return Path(unquote(parts.path))
        return Url(path)
    return Path(path)


def _filesystem(url: str) -> tuple[Any, str]:
    """fsspec's filesystem for ``url`` and the path inside it; a missing package is a one-line InputError."""
    try:
        import fsspec
    except ImportError:
        raise InputError(url, "reading a URL needs the fsspec package (pip install fsspec; "
                         "it comes with gpuprof's 'remote' extra)") from None
    protocol = url.split("://", 1)[0].lower()
    try:
        bare, login = _login_decoded(url, protocol)
        fs, inner = fsspec.core.url_to_fs(bare, **login)
    except ImportError as err:
        raise InputError(url, f"reading {protocol}:// needs {_package_for(protocol, err)}") from None
    except ValueError as err:  # "Protocol not known: xyz"
        raise InputError(url, f"no fsspec filesystem for {protocol}:// ({err})") from None
    except _backend_errors() as err:  # a backend that connects when made (ftp://): refused, unreachable
        raise _store_error(url, err, "connect") from None
    return fs, inner


# Filesystems that take the URL's login as username/password arguments (fsspec's infer_storage_options).
_LOGIN_PROTOCOLS = ("ftp", "sftp", "ssh", "smb")


def _login_decoded(url: str, protocol: str) -> tuple[str, dict[str, str]]:
    """``url`` and fsspec options, with a percent-encoded login decoded (``ftp://u:a%2Fb@h/``).

    fsspec hands ``user:password`` to the server as written, so a password holding ``/`` or ``@``,
    which a URL can only carry encoded, never logged in. For the protocols that take a login, the
    decoded one goes as options and the URL without it; other URLs are left to fsspec as they are.
    """
    parts = urlsplit(url)
    if protocol not in _LOGIN_PROTOCOLS or "%" not in parts.netloc.rpartition("@")[0]:
        return url, {}
    login, _, host = parts.netloc.rpartition("@")
    user, _, password = login.partition(":")
    options = {"username": unquote(user), "password": unquote(password)}
    return parts._replace(netloc=host).geturl(), {k: v for k, v in options.items() if v}


def _package_for(protocol: str, err: ImportError) -> str:
    """The package fsspec needs for ``protocol``: the module its import failed on, else its registry's entry.

    The registry names fsspec's own module for protocols it implements itself (``http``:
    ``fsspec.implementations.http``), whose missing dependency (``aiohttp``) is the one to install.
    """
    # fsspec raises its registry's message "from" the import that failed: that one names the module
    cause = err.__cause__ if isinstance(err.__cause__, ImportError) else err
    missing = (cause.name or err.name or "").split(".", 1)[0]
    if missing and missing != "fsspec":
        return f"the {missing} package (pip install {missing})"
    from fsspec.registry import known_implementations

    impl = known_implementations.get(protocol, {})
    module = str(impl.get("class", "")).split(".", 1)[0]
    if module and module != "fsspec":
        return f"the {module} package (pip install {module})"
    return f"a package fsspec could not import ({' '.join(str(err).split())})"


def _store_error(url: str, err: BaseException, doing: str) -> InputError:
    """One line for a store that refused or failed (the URL and any quoted secret masked by InputError)."""
    unreachable = None if isinstance(err, FileNotFoundError) else _unreachable(err)
    if unreachable is not None:  # a refused connection says so, whatever the store's library wrapped it in
        return InputError(url, unreachable)
    if isinstance(err, OSError):
        return InputError.from_os_error(url, err, doing)
    import ftplib

    if isinstance(err, ftplib.error_perm) and str(err)[:3] in ("530", "331", "332"):
        return InputError(url, f"the server refused the login ({' '.join(str(err).split())})")
    return InputError(url, f"cannot {doing}: {describe_error(err)}")


def _url_maker(url: str, fs: Any, inner: str) -> Callable[[str], Url]:
    """How to turn a path from ``fs``'s listings back into a URL that opens alone.

    Object stores keep the bucket in the path (``bucket/key``: fsspec's ``unstrip_protocol``
    rebuilds the URL). A filesystem bound to one host (``ftp://user:pw@host:21/dir``) lists
    bare paths (``/dir/f``): the URL's own ``scheme://user:pw@host:port`` is put back in front,
    or each file would be looked for on no host at all.
    """
    scheme_end = url.index("://") + 3
    netloc = urlsplit(url).netloc
    user, _, host = netloc.rpartition("@")
    # bound to a host: fsspec's path keeps neither the host nor what stands before its "@" (abfs://
    # names the container there, and keeps it in the path: that is a store with buckets, not a host)
    first = inner.lstrip("/").split("/", 1)[0]
    if host and first not in (host, user.split(":", 1)[0]):
        origin = url[: scheme_end + len(netloc)]
        return lambda p: Url(p if "://" in p else origin + "/" + p.lstrip("/"))
    return lambda p: Url(p if "://" in p else fs.unstrip_protocol(p))


def _capped(url: str, paths: list[str]) -> list[str]:
    cap = MAX_URL_MATCHES.value()
    if len(paths) > cap:
        raise InputError(url, MAX_URL_MATCHES.exceeded(f"names {len(paths):,} files"))
    return paths


def _files(listing: Any) -> list[str]:
    """The file paths of a ``detail=True`` listing (``{path: info}``), from the listing itself: no
    metadata request per object (``fs.isdir(p)`` per match cost one listing each, quadratic overall)."""
    items = listing.items() if isinstance(listing, dict) else ((d.get("name"), d) for d in listing)
    return [str(p) for p, info in items if not (isinstance(info, dict) and info.get("type") == "directory")]


def find_remote(url: str, wanted: Callable[[str], bool]) -> list[Url]:
    """The files a URL names: the object itself, every match of a glob, or every object under a prefix
    whose file name ``wanted`` accepts (the caller's rule, e.g. ``gpuprof.trace.source.is_trace_name``), sorted."""
    fs, inner = _filesystem(url)
    url_of = _url_maker(url, fs, inner)
    try:
        if any(c in inner for c in _GLOB_CHARS):
            found = _capped(url, _files(fs.glob(inner, detail=True)))
            if not found:
                raise InputError(url, "the pattern matches no file")
            return [url_of(p) for p in sorted(found)]
        info = _info(fs, inner, url)
        if info is None:
            raise InputError(url, "no such file or directory")
        if info.get("type") == "directory":
            found = _capped(url, [p for p in _files(fs.find(inner, detail=True)) if wanted(p.rsplit("/", 1)[-1])])
            if not found:
                raise InputError(url, "directory holds no trace files (*.json or *.json.gz)")
            return [url_of(p) for p in sorted(found)]
    except InputError:
        raise
    except _backend_errors() as err:  # PermissionError, a refused login, a server that hung up...
        raise _store_error(url, err, "list") from None
    return [Url(url)]


def _info(fs: Any, inner: str, url: str) -> dict[str, Any] | None:
    """``fs.info(inner)``, None when there is nothing there; one metadata request.

    fsspec's HTTP store says FileNotFoundError for every failure of its HEAD and GET, a refused connection
    included: the cause it chains says which, and a store that could not be reached is an InputError saying
    so (``connection refused``), never "no such file".
    """
    try:
        info = fs.info(inner)
    except FileNotFoundError as err:
        problem = _unreachable(err.__cause__ or err.__context__)
        if problem is not None:
            raise InputError(url, problem) from None
        return None
    return info if isinstance(info, dict) else {}


def _unreachable(err: BaseException | None) -> str | None:
    """What kept the store from answering, from ``err`` and the exceptions chained to it: None when it answered
    (an HTTP 404 is a file that is not there) or nothing says."""
    import errno
    import socket

    seen: set[int] = set()
    cause = err
    while cause is not None and id(cause) not in seen and len(seen) < 16:
        seen.add(id(cause))
        status = getattr(cause, "status", None)
        if isinstance(status, int) and 400 <= status < 600:  # the server answered (aiohttp's ClientResponseError)
            if status == 404 or status == 410:
                return None
            if status in (401, 403):
                return f"the server refused access (HTTP {status})"
            return f"the server answered HTTP {status}"
        if isinstance(cause, ConnectionRefusedError) or getattr(cause, "errno", None) == errno.ECONNREFUSED:
            return "connection refused"
        if isinstance(cause, ConnectionResetError):
            return "the connection was reset by the server"
        if isinstance(cause, socket.gaierror):
            return f"cannot resolve the host name ({' '.join(str(cause).split())})"
        if isinstance(cause, TimeoutError) or type(cause).__name__ in ("ServerTimeoutError", "ConnectionTimeoutError"):
            return "the server did not answer in time"
        if isinstance(cause, OSError) and not isinstance(cause, FileNotFoundError) and cause.errno is not None:
            return f"cannot connect: {cause.strerror or describe_error(cause)}"
        cause = cause.__cause__ or cause.__context__
    return None


def open_remote(url: str, peek: int) -> tuple[str, BinaryIO, bytes, int | None]:
    """Open ``url`` for one front-to-back read and read its first ``peek`` bytes: ``(name shown, stream, head,
    size)``; :func:`gpuprof.inputs.open_input` makes it an ``Opened`` (the stream hands the head out again)."""
    fs, inner = _filesystem(url)
    name = redact(url)
    try:
        info = _info(fs, inner, url)
        if info is None:
            raise InputError(url, "no such file")
        if info.get("type") == "directory":
            raise InputError(url, "is a directory")
        size = info.get("size")
        # Read-ahead cache: blocks are fetched as the decoder asks for them (streaming), in big enough
        # requests that object storage's per-request latency is paid once per few MiB, not per read.
        raw: BinaryIO = fs.open(inner, "rb", block_size=8 * 1024 * 1024, cache_type="readahead")
    except InputError:
        raise
    except _backend_errors() as err:
        raise _store_error(url, err, "open") from None
    try:
        head = raw.read(peek) if peek else b""
    except _backend_errors() as err:
        raw.close()
        raise _store_error(url, err, "read") from None
    return name, raw, head, int(size) if isinstance(size, (int, float)) else None


def modified_time(url: str) -> float | None:
    """When the object at ``url`` was last modified (POSIX seconds), or None where its store does not say."""
    fs, inner = _filesystem(url)
    try:
        when = fs.modified(inner)
    except _backend_errors() + (NotImplementedError, ValueError, TypeError):
        return None
    try:
        return float(when.timestamp())
    except (AttributeError, OverflowError, OSError, ValueError):
        return None
