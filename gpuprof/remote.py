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
argument for them and never prints one: a URL's ``user:password@`` part is
masked in every message (:func:`shown`).

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

from gpuprof.errors import InputError

__all__ = ["Url", "TraceFile", "is_url", "local_or_url", "find_remote", "open_remote", "modified_time", "shown"]

# scheme "://" (RFC 3986 scheme characters); a Windows drive ("C:\\") has no "//" and is not one
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
_CREDENTIALS = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@")
_GLOB_CHARS = ("*", "?", "[")


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


def shown(url: str) -> str:
    """``url`` with any ``user:password@`` removed: what gpuprof prints of a URL."""
    return _CREDENTIALS.sub(r"\1***@", url)


def local_or_url(path: str | os.PathLike[str]) -> TraceFile:
    """A local path as :class:`Path` (``file://`` URLs included), any other URL as :class:`Url`."""
    if isinstance(path, Url):
        return path
    if isinstance(path, str) and is_url(path):
        if path[:7].lower() == "file://":
            parts = urlsplit(path)
            if parts.netloc not in ("", "localhost"):
                raise InputError(shown(path), "a file:// URL must name this machine (file:///path)")
            return Path(unquote(parts.path))
        return Url(path)
    return Path(path)


def _filesystem(url: str) -> tuple[Any, str]:
    """fsspec's filesystem for ``url`` and the path inside it; a missing package is a one-line InputError."""
    try:
        import fsspec
    except ImportError:
        raise InputError(shown(url), "reading a URL needs the fsspec package (pip install fsspec; "
                         "it comes with gpuprof's 'remote' extra)") from None
    protocol = url.split("://", 1)[0].lower()
    try:
        fs, inner = fsspec.core.url_to_fs(url)
    except ImportError as err:
        raise InputError(shown(url), f"reading {protocol}:// needs {_package_for(protocol, err)}") from None
    except ValueError as err:  # "Protocol not known: xyz"
        raise InputError(shown(url), f"no fsspec filesystem for {protocol}:// ({err})") from None
    return fs, inner


def _package_for(protocol: str, err: ImportError) -> str:
    """The package fsspec needs for ``protocol``, from its own registry's message when it has one."""
    from fsspec.registry import known_implementations

    impl = known_implementations.get(protocol, {})
    module = str(impl.get("class", "")).split(".", 1)[0]
    if module:
        return f"the {module} package (pip install {module})"
    return f"a package fsspec could not import ({err})"


def _url_of(fs: Any, inner: str) -> Url:
    """The URL of ``inner``, a path inside ``fs`` (as fsspec's listings give them)."""
    return Url(inner) if "://" in inner else Url(fs.unstrip_protocol(inner))


def find_remote(url: str, wanted: Callable[[str], bool]) -> list[Url]:
    """The files a URL names: the object itself, every match of a glob, or every object under a prefix
    whose file name ``wanted`` accepts (the caller's rule, e.g. ``gpuprof.trace.source.is_trace_name``), sorted."""
    fs, inner = _filesystem(url)
    try:
        if any(c in inner for c in _GLOB_CHARS):
            found = sorted(str(p) for p in fs.glob(inner) if not fs.isdir(p))
            if not found:
                raise InputError(shown(url), "the pattern matches no file")
            return [_url_of(fs, p) for p in found]
        if fs.isdir(inner):
            found = sorted(
                str(p) for p in fs.find(inner) if wanted(str(p).rsplit("/", 1)[-1])
            )
            if not found:
                raise InputError(shown(url), "directory holds no trace files (*.json or *.json.gz)")
            return [_url_of(fs, p) for p in found]
        if not fs.exists(inner):
            raise InputError(shown(url), "no such file or directory")
    except InputError:
        raise
    except OSError as err:  # fsspec backends raise OSError subclasses (PermissionError, FileNotFoundError...)
        raise InputError.from_os_error(shown(url), err, "list") from None
    return [Url(url)]


def open_remote(url: str, peek: int) -> tuple[str, BinaryIO, bytes, int | None]:
    """Open ``url`` for one front-to-back read and read its first ``peek`` bytes: ``(name shown, stream, head,
    size)``; :func:`gpuprof.inputs.open_input` makes it an ``Opened`` (the stream hands the head out again)."""
    fs, inner = _filesystem(url)
    name = shown(url)
    try:
        if fs.isdir(inner):
            raise InputError(name, "is a directory")
        size = fs.size(inner)
        # Read-ahead cache: blocks are fetched as the decoder asks for them (streaming), in big enough
        # requests that object storage's per-request latency is paid once per few MiB, not per read.
        raw: BinaryIO = fs.open(inner, "rb", block_size=8 * 1024 * 1024, cache_type="readahead")
    except InputError:
        raise
    except OSError as err:
        raise InputError.from_os_error(name, err) from None
    try:
        head = raw.read(peek) if peek else b""
    except OSError as err:
        raw.close()
        raise InputError.from_os_error(name, err, "read") from None
    return name, raw, head, int(size) if size is not None else None


def modified_time(url: str) -> float | None:
    """When the object at ``url`` was last modified (POSIX seconds), or None where its store does not say."""
    fs, inner = _filesystem(url)
    try:
        when = fs.modified(inner)
    except (OSError, NotImplementedError, ValueError, TypeError):
        return None
    try:
        return float(when.timestamp())
    except (AttributeError, OverflowError, OSError, ValueError):
        return None
