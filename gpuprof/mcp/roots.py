"""What ``gpuprof mcp`` may read and write: the folders and URL prefixes given with ``--root``.

An agent names inputs freely; the server reads only under its roots. Every name is checked before any
library function sees it, and a refusal is an :class:`~gpuprof.errors.InputError` (the command line's
one line, ``PATH: problem``, with a URL's credentials masked):

* a local name may be relative (to the first root where it exists) or absolute; a ``..`` component is
  refused outright, and the name's real path (every symlink resolved) must lie inside the real path of
  a root, so a symlink is followed only where it stays inside;
* what it names must be a regular file or a directory: a FIFO, socket or device is refused from its
  ``stat``, never opened (opening a FIFO blocks until someone writes);
* a directory is walked first (no symlink followed, at most :data:`MAX_WALK_ENTRIES` entries): a symlink
  in it that leads out of the root, the way the trace finder or the run's report.json reader would follow
  it, refuses the whole request;
* a URL must start with a root URL on a path-segment boundary, compared on its normal form (scheme and
  host in lower case, default port, credentials aside); ``.``/``..`` segments (also percent-encoded) are
  refused; it is read with the root's own credentials, so an agent never needs or sees them;
* an output directory (``export``) must be inside a local root, or is a fresh temporary directory.

A file swapped for a symlink between the check and the read is not caught here (the check and the read
are two steps); the roots are the user's own folders, not a sandbox against a local attacker.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

from gpuprof.errors import InputError
from gpuprof.redact import redact
from gpuprof.remote import is_url

__all__ = ["Roots", "UrlRoot", "MAX_WALK_ENTRIES"]

MAX_WALK_ENTRIES = 200_000  # as the TensorBoard tab's walk (docs/limits.md): a real run folder has a few files
_DEFAULT_PORTS = {"http": 80, "https": 443, "ftp": 21, "sftp": 22, "ssh": 22, "smb": 445}


@dataclass(frozen=True)
class UrlRoot:
    """A root URL: its normal form's parts, and the URL as given (with the credentials it reads with)."""

    given: str
    scheme: str
    host: str
    segments: tuple[str, ...]
    query: str

    @classmethod
    def parse(cls, url: str) -> UrlRoot:
        scheme, host, segments, query = _normal(url)
        return cls(url, scheme, host, segments, query)

    @property
    def shown(self) -> str:
        return redact(self.given)

    def join(self, segments: tuple[str, ...], query: str) -> str:
        """The URL to read: this root's own scheme, login and host, then ``segments`` (the request's path)."""
        parts = urlsplit(self.given)
        path = "/" + "/".join(segments) if segments else parts.path
        return parts._replace(path=path, query=query, fragment="").geturl()


def _normal(url: str) -> tuple[str, str, tuple[str, ...], str]:
    """``url``'s scheme, host[:port] (lower case, default port dropped), path segments and query; InputError
    for a chained URL, a ``.``/``..`` segment, a fragment or a malformed authority."""
    if "::" in url:  # fsspec reads "a::b" as filesystems chained: the part checked would not be the part read
        raise InputError(url, "a chained URL (::) is refused: name one URL under a root")
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as err:
        raise InputError(url, f"not a URL gpuprof can read ({err})") from None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower()
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        host = f"{host}:{port}"
    raw = [s for s in parts.path.split("/") if s]
    if any(unquote(s) in (".", "..") for s in raw):
        raise InputError(url, "'.' and '..' are refused in a URL: name the object by its own path")
    if parts.fragment:
        raise InputError(url, "a URL with a #fragment is refused")
    return scheme, host, tuple(raw), parts.query


@dataclass(frozen=True)
class Roots:
    """The folders (real paths) and URL prefixes a server reads; see the module docstring."""

    dirs: tuple[Path, ...]
    urls: tuple[UrlRoot, ...]

    @classmethod
    def of(cls, given: list[str] | tuple[str, ...]) -> Roots:
        """The roots as given to ``--root``; a folder that is missing or not a directory is an InputError."""
        dirs: list[Path] = []
        urls: list[UrlRoot] = []
        for g in given:
            if is_url(g) and g[:7].lower() != "file://":
                redact(g)  # remembers its secrets: every later line is scrubbed of them (gpuprof.redact)
                urls.append(UrlRoot.parse(g))
                continue
            from gpuprof.remote import local_or_url

            p = local_or_url(g)
            try:
                st = os.stat(p)
            except OSError as err:
                raise InputError.from_os_error(g, err) from None
            if not stat.S_ISDIR(st.st_mode):
                raise InputError(g, "a --root must be a directory or a URL prefix")
            dirs.append(Path(os.path.realpath(p)))
        if not dirs and not urls:
            raise InputError("--root", "give at least one folder or URL prefix to serve")
        return cls(tuple(dirs), tuple(urls))

    def shown(self) -> list[str]:
        """The roots as an agent may see them (credentials masked)."""
        return [str(d) for d in self.dirs] + [u.shown for u in self.urls]

    def _outside(self, name: str) -> InputError:
        return InputError(name, "outside the folders and URL prefixes this server reads (gpuprof mcp --root: "
                          + ", ".join(self.shown()) + ")")

    # --- inputs ---------------------------------------------------------------------------------------

    def input(self, name: str) -> str:
        """The path or URL to read for ``name``, checked (module docstring); InputError when refused."""
        if not isinstance(name, str) or not name or "\0" in name:
            raise InputError(repr(name)[:80], "not a file name")
        if name == "-":
            raise InputError(name, "standard input is the protocol's channel; name a file under the roots")
        if is_url(name) and name[:7].lower() != "file://":
            return self._url_input(name)
        if is_url(name):
            from gpuprof.remote import local_or_url

            name = os.fspath(local_or_url(name))
        path = self._local(name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            raise InputError(name, "no such file or directory") from None  # the command line's words (find_traces)
        except OSError as err:
            raise InputError.from_os_error(name, err) from None
        if stat.S_ISDIR(st.st_mode):
            self._check_tree(name, path)
        elif not stat.S_ISREG(st.st_mode):
            raise InputError(name, "not a regular file or directory (a FIFO, socket or device is refused unread)")
        return os.fspath(path)

    def _local(self, name: str) -> Path:
        """The real path of a local ``name`` inside a root (it may not exist yet: the caller stats it)."""
        if ".." in Path(name).parts:
            raise InputError(name, "'..' is refused: name a path inside the roots")
        if not self.dirs:
            raise self._outside(name)
        if os.path.isabs(name):
            candidates = [Path(name)]
        else:
            candidates = [d / name for d in self.dirs]
            candidates = [c for c in candidates if os.path.lexists(c)] or candidates[:1]
        real = Path(os.path.realpath(candidates[0]))
        if self._root_of(real) is None:
            raise self._outside(name)
        return real

    def _root_of(self, real: Path) -> Path | None:
        for d in self.dirs:
            if real == d or d in real.parents:
                return d
        return None

    def _check_tree(self, name: str, top: Path) -> None:
        """Refuse a directory holding a symlink out of the roots (walked without following any), or too big to walk."""
        seen = 0
        for dirpath, dirnames, filenames in os.walk(top, followlinks=False):
            for entry in dirnames + filenames:
                seen += 1
                if seen > MAX_WALK_ENTRIES:
                    raise InputError(name, f"holds over {MAX_WALK_ENTRIES:,} entries; name a run folder or a file")
                full = os.path.join(dirpath, entry)
                if os.path.islink(full) and self._root_of(Path(os.path.realpath(full))) is None:
                    rel = os.path.relpath(full, top)
                    raise InputError(name, f"holds a symlink leading outside the server's roots ({rel})")

    def _url_input(self, name: str) -> str:
        scheme, host, segments, query = _normal(name)
        given_login = urlsplit(name).netloc.rpartition("@")[0]
        for root in self.urls:
            if (scheme, host) != (root.scheme, root.host) or segments[: len(root.segments)] != root.segments:
                continue
            root_login = urlsplit(root.given).netloc.rpartition("@")[0]
            if given_login and given_login not in (root_login, "***"):
                raise InputError(name, "a URL under a root is read with the root's own login; give it without one")
            if root.query and (segments != root.segments or query not in ("", root.query)):
                continue  # a signed URL as a root names that one object, nothing under it
            return root.join(segments, query or root.query)
        raise self._outside(name)

    # --- outputs --------------------------------------------------------------------------------------

    def output_dir(self, name: str | None) -> tuple[str, bool]:
        """The directory ``export`` writes to and whether it is a fresh temporary one (``name`` None)."""
        if name is None:
            import tempfile

            return tempfile.mkdtemp(prefix="gpuprof-export-"), True
        if not isinstance(name, str) or not name or "\0" in name:
            raise InputError(repr(name)[:80], "not a directory name")
        if is_url(name):
            raise InputError(name, "export writes local files: name a folder under a root")
        if ".." in Path(name).parts:
            raise InputError(name, "'..' is refused: name a path inside the roots")
        if not self.dirs:
            raise InputError(name, "this server has no local root to write under (omit output for a temporary folder)")
        target = Path(name) if os.path.isabs(name) else self.dirs[0] / name
        # the nearest existing ancestor, resolved, must be inside a root; the rest is created by export itself
        # (gpuprof.export.write.prepare_dir, which refuses a symlink as the directory)
        existing = target
        while not os.path.lexists(existing) and existing != existing.parent:
            existing = existing.parent
        real = Path(os.path.realpath(existing))
        if self._root_of(real) is None:  # a symlink on the way is followed only where it stays inside
            raise self._outside(name)
        return os.fspath(real / target.relative_to(existing)), False
