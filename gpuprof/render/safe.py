"""Display-safe text: names from traces and snapshots made inert before any renderer shows them.

Kernel, operator, frame and file names come from strangers (a trace attached
to an issue, a colleague's snapshot). Printed raw, ``\\x1b[2J`` clears the
user's terminal, an OSC 8 sequence plants a link, OSC 0 retitles the window,
and a right-to-left override makes ``evil.py`` read as something else. Every
renderer (terminal, markdown, the capture summary, TensorBoard text) passes
such text through :func:`visible` first, which replaces each of these
characters by a visible escape (``\\x1b``, ``\\u202e``) so the name stays
recognisable and distinct, but nothing in it acts on the terminal.

JSON output is not passed through here: it is data, and JSON escapes control
characters itself.
"""

from __future__ import annotations

__all__ = ["visible", "one_line", "clip", "shorten", "shorten_distinct", "is_inert", "UNSAFE_CODEPOINTS", "MAX_TEXT"]

#: The most characters of one piece of data (a name, a path, a message) a renderer shows: a
#: 200,000-character kernel name must not turn a report into megabytes.
MAX_TEXT = 1000


def _unsafe() -> frozenset[int]:
    cps = set(range(0x00, 0x20))  # C0 controls (ESC, BEL, NUL, CR, BS, newline, tab)
    cps.add(0x7F)  # DEL
    cps.update(range(0x80, 0xA0))  # C1 controls (0x9b is a one-byte CSI)
    cps.update(range(0x202A, 0x202F))  # LRE RLE PDF LRO RLO: bidi embeddings and overrides
    cps.update(range(0x2066, 0x206A))  # LRI RLI FSI PDI: bidi isolates
    cps.update((0x200E, 0x200F, 0x061C))  # LRM RLM ALM: invisible direction marks
    cps.update((0x2028, 0x2029))  # line and paragraph separators: a line break to some readers
    return frozenset(cps)


#: The code points :func:`visible` replaces.
UNSAFE_CODEPOINTS = _unsafe()


def _escape(cp: int) -> str:
    return f"\\x{cp:02x}" if cp < 0x100 else f"\\u{cp:04x}"


# str.translate with a dict is the fastest way to map a few code points in long text
_TABLE = {cp: _escape(cp) for cp in UNSAFE_CODEPOINTS}


def visible(text: object) -> str:
    """``text`` with every control character, DEL, bidi control and line separator shown as an escape.

    ``"clear\\x1b[2J"`` becomes the 12 printable characters ``clear\\x1b[2J``;
    ``"\\u202e"`` becomes ``\\u202e``. Backslashes are left alone so Windows
    paths stay readable; a name that literally spells ``\\x1b`` therefore
    looks like one that holds ESC, which is harmless: neither acts.
    """
    return str(text).translate(_TABLE)


def one_line(text: object, limit: int = MAX_TEXT) -> str:
    """Prose on one line: runs of whitespace (newlines included) become one space, then :func:`clip`."""
    return clip(" ".join(str(text).split()), limit)


def clip(text: object, limit: int = MAX_TEXT) -> str:
    """:func:`visible`, then cut in the middle to at most ``limit`` characters."""
    return shorten(visible(text), limit)


def shorten(name: str, width: int = 60) -> str:
    """Cut a long (kernel) name in the middle so both the namespace and the template tail stay visible.

    Names that differ at either end stay distinct.
    """
    if len(name) <= width:
        return name
    keep = width - 1
    head = (keep + 1) // 2
    tail = keep - head
    return name[:head] + "…" + (name[-tail:] if tail else "")


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _keep(name: str, spans: list[tuple[int, int]]) -> str:
    """The characters of ``name`` inside ``spans``, with ``…`` for each gap between them."""
    merged: list[list[int]] = []
    for a, b in sorted((max(0, a), min(len(name), b)) for a, b in spans if b > a):
        if merged and a <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], b)
        else:
            merged.append([a, b])
    out = []
    pos = 0
    for a, b in merged:
        if a > pos:
            out.append("…")
        out.append(name[a:b])
        pos = b
    if pos < len(name):
        out.append("…")
    return "".join(out)


def _around(name: str, start: int, end: int, width: int) -> str:
    """``name`` cut to ``width`` keeping ``name[start:end]`` (the part that tells it apart) plus both ends."""
    if len(name) <= width:
        return name
    room = width - 2  # two "…" at most
    core = max(1, min(end - start, max(room // 3, 3)))  # from where they start to differ
    rest = room - core
    head = max(1, (rest + 1) // 2)
    tail = max(1, rest - head)
    text = _keep(name, [(0, head), (start, start + core), (len(name) - tail, len(name))])
    return text if len(text) <= width else shorten(name, width)


def _tell_apart(group: list[str], width: int) -> dict[str, str]:
    """Cuts of the (different) names in ``group`` that differ from each other."""
    # first: each name keeps the part where it starts to differ from the others
    cut: dict[str, str] = {}
    for n in group:
        others = [o for o in group if o != n]
        start = min(_common_prefix(n, o) for o in others)
        end = len(n) - min(_common_prefix(n[::-1], o[::-1]) for o in others)
        cut[n] = _around(n, start, max(end, start + 1), width)
    if len(set(cut.values())) == len(group):
        return cut
    # names that differ in several places: keep a little of each place where some two of them part
    starts = sorted({_common_prefix(a, b) for i, a in enumerate(group) for b in group[i + 1 :]})
    for start in starts:
        cut = {n: _around(n, start, len(n), width) for n in group}
        if len(set(cut.values())) == len(group):
            return cut
    room = width - (len(starts) + 1)  # a "…" before each kept place and before the tail
    each = (room - 4) // len(starts) if starts else 0
    if each >= 2:
        ends = room - each * len(starts)
        head, tail = (ends + 1) // 2, ends // 2
        cut = {n: _keep(n, [(0, head)] + [(s, s + each) for s in starts] + [(len(n) - tail, len(n))]) for n in group}
        if len(set(cut.values())) == len(group) and all(len(c) <= width for c in cut.values()):
            return cut
    # still the same: number them
    return {n: shorten(n, width - len(f"~{i}")) + f"~{i}" for i, n in enumerate(group, 1)}


def shorten_distinct(names: list[str], width: int) -> list[str]:
    """:func:`shorten` for each name, but different names never come out the same.

    Names that :func:`shorten` would cut to the same text (two kernels that
    differ only in the middle of a long template) keep the part where they
    differ, between two ``…``; if that is still not enough, a ``~N`` suffix
    tells them apart. Equal names stay equal. Pass names through
    :func:`visible` first.
    """
    width = max(width, 4)
    out = [shorten(n, width) for n in names]
    for _ in range(2):
        groups: dict[str, set[str]] = {}
        for n, s in zip(names, out):
            groups.setdefault(s, set()).add(n)
        clashes = {s: sorted(g) for s, g in groups.items() if len(g) > 1}
        if not clashes:
            return out
        fixed: dict[str, str] = {}
        for group in clashes.values():
            fixed.update(_tell_apart(group, width))
        out = [fixed.get(n, s) for n, s in zip(names, out)]
    return out


def is_inert(text: str) -> bool:
    """True when ``text`` holds none of the characters :func:`visible` replaces."""
    return not any(ord(c) in UNSAFE_CODEPOINTS for c in text)
