"""Credentials never leave a URL: what gpuprof shows of a URL, and of any text that may hold one.

A URL given as input (``ftp://user:password@host/run/``, a presigned
``https://...?X-Amz-Signature=...``) or as a ``--dask`` address
(``tls://user:pw@scheduler:8786``) may carry a secret. gpuprof still needs
the URL whole to read it, but everything it shows (the report's ``inputs``
and trace paths, every renderer, error lines) gets :func:`redact`'s form:

* the user-information part is masked, ``ftp://***@host/run/``. Secrets
  hold ``/``, ``+``, ``=``, ``@`` (an AWS key such as ``AKIA:ab/c+d=``), and
  a URL with such a password cannot be parsed as RFC 3986 says, so when the
  part before the first ``/`` holds an ``@`` or a ``:`` (a password, or a
  port) and an ``@`` follows anywhere, everything between ``://`` and the
  last ``@`` is masked: a path with an ``@`` in it after a ``host:port`` is
  shown masked too, which is the safe way to be wrong;
* the values of query parameters that carry secrets (``X-Amz-Signature``,
  ``sig``, ``token``, ``password``... see :data:`SECRET_PARAMS`) become ``***``.

Each secret masked is remembered for the life of the process, and
:func:`scrub` removes it (and any URL's credentials) from free text: an
error message from fsspec, ftplib or Dask may quote the URL or the password
in a form of its own (percent-decoded, say).

This module imports nothing of gpuprof's, so that :mod:`gpuprof.errors` can use it.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import unquote

__all__ = ["MASK", "SECRET_PARAMS", "redact", "scrub", "remember_secret"]

MASK = "***"

# Query parameters whose value is a credential (lower case; matched case-insensitively). Signed URLs of S3
# (X-Amz-*), GCS (X-Goog-*), Azure SAS (sig, se is not secret), and the usual token/password names.
SECRET_PARAMS = (
    "x-amz-signature", "x-amz-credential", "x-amz-security-token", "x-goog-signature", "x-goog-credential",
    "sig", "signature", "token", "access_token", "id_token", "refresh_token", "auth", "authorization",
    "password", "passwd", "pwd", "secret", "client_secret", "key", "api_key", "apikey", "access_key",
    "secret_key", "sas", "credential", "credentials",
)

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_QUERY_SECRET = re.compile(
    r"([?&;](?:" + "|".join(re.escape(p) for p in SECRET_PARAMS) + r")=)[^&;#\s]*", re.IGNORECASE
)
# a URL inside free text: a scheme, then anything up to white space or a quote/bracket that ends it in prose
_URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()\[\]{}]+")

_seen: set[str] = set()  # every secret masked so far, for scrub()
_seen_lock = threading.Lock()
_MIN_SECRET = 4  # shorter "secrets" (a one-letter user) would blot out ordinary words in messages


def _userinfo_end(url: str, start: int) -> int:
    """Where the credentials of ``url`` end (the index of their ``@``), or -1 when it has none.

    ``start``: the index just after ``://``.
    """
    rest = url[start:]
    last_at = rest.rfind("@")
    if last_at < 0:
        return -1
    slash = rest.find("/")
    authority = rest if slash < 0 else rest[:slash]
    if "@" in authority or ":" in authority:
        return start + last_at  # see the module docstring: mask up to the last "@" when in doubt
    return -1


def redact(url: str) -> str:
    """``url`` as gpuprof shows it: credentials and secret query values masked (module docstring).

    Text that is not a URL comes back unchanged, so callers may pass any input name.
    """
    m = _SCHEME.match(url)
    if m is None:
        return url
    out = url
    end = _userinfo_end(url, m.end())
    if end >= 0:
        _remember(url[m.end():end])
        out = url[: m.end()] + MASK + url[end:]
    if "=" in out:
        for q in _QUERY_SECRET.finditer(out):
            _remember(q.group(0)[len(q.group(1)):])
        out = _QUERY_SECRET.sub(lambda q: q.group(1) + MASK, out)
    return out


def scrub(text: str) -> str:
    """``text`` with every URL in it redacted and every secret redacted so far masked, however quoted."""
    if "://" in text:
        text = _URL_IN_TEXT.sub(lambda m: redact(m.group(0)), text)
    with _seen_lock:
        secrets = sorted(_seen, key=len, reverse=True)  # the whole user:password before the password alone
    for s in secrets:
        if s in text:
            text = text.replace(s, MASK)
    return text


def remember_secret(secret: str) -> None:
    """Mask ``secret`` (an API key or token read from the environment) in everything :func:`scrub` cleans."""
    if len(secret) >= _MIN_SECRET:
        with _seen_lock:
            _seen.update({secret, unquote(secret)} - {MASK})


def _remember(userinfo: str) -> None:
    """Keep the secret parts of ``userinfo`` (``user:password``, or a query value) in raw and decoded form."""
    parts = {userinfo}
    if ":" in userinfo:
        parts.add(userinfo.split(":", 1)[1])  # the password alone (the user name may appear in prose)
    found = {p for part in parts for p in (part, unquote(part), unquote(part.replace("+", " ")))}
    with _seen_lock:
        _seen.update(p for p in found if len(p) >= _MIN_SECRET and p != MASK)
