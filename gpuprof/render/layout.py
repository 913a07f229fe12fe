"""Fitting text and tables to a terminal width without cutting a word or a number.

Every terminal screen (``analyze``, ``rules``, ``memory``) lays its tables out
here rather than in a rich ``Table``: rich shrinks every column of a table too
wide for the terminal, so at 80 columns a severity reads ``wa…`` and a
location ``resnet50_…module>)``. The policy here:

- columns of numbers and short words (``"left"``/``"right"``) keep their full
  width, always;
- columns of names and prose (``"wrap"``) get the width that is left, and a
  cell too long for it continues on the next lines, broken after a blank, and
  only inside a word wider than the column after a ``,``, ``/``, ``\\``,
  ``::``, ``(`` or ``<`` (so a C++ kernel name or a path breaks between its
  parts), then after ``_`` or ``.``; the continuation lines are indented, so a
  reader sees where a cell goes on;
- when the wrapped columns would get narrower than :data:`MIN_WRAP` (or the
  fixed columns alone do not fit), each row is *stacked* instead: its first
  wrapped cell on its own lines, then ``header value`` pairs below it;
- at a width with room to spare, a wrapped column takes its natural width, so
  a long kernel name is shown on one line when it fits.

A cell longer than :data:`MAX_CELL_LINES` lines at its width is cut in the
middle first (one huge name from a hostile trace cannot fill the screen); the
full text is in the JSON report.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

from rich.cells import cell_len

from gpuprof.render.safe import clip, shorten, visible

if TYPE_CHECKING:  # pragma: no cover - annotations only: wrap_text (the end-of-run card's) needs no rich console
    from rich.console import Console
    from rich.text import Text

__all__ = ["wrap_text", "table_lines", "emit_table", "GAP", "MIN_WRAP", "MAX_CELL_LINES", "INDENT"]

GAP = 3  # blanks between two columns
MIN_WRAP = 20  # a wrapped column narrower than this makes the table stack its rows
MAX_CELL_LINES = 10  # a cell is cut in the middle beyond this many lines (real kernel names need up to ~7 at 80 columns)
INDENT = 2  # continuation lines of a wrapped cell are indented this much

# Where a line may break, best first: after a blank; inside a word too long for the line, after
# "," "/" "\" "(" "<" "|" ";" or "::"; then after "_" "-" "." ":" ">" ")" "="; else anywhere.
_LEVELS = (re.compile(r"(?<=\s)"), re.compile(r"(?<=[,/\\(<|;])|(?<=::)"), re.compile(r"(?<=[_\-.:>)=])"))


def _hard_split(piece: str, width: int) -> list[str]:
    """``piece`` in runs of at most ``width`` cells (the last resort: a part with no break point)."""
    out: list[str] = []
    cur = ""
    for ch in piece:
        if cur and cell_len(cur + ch) > width:
            out.append(cur)
            cur = ""
        cur += ch
    if cur:
        out.append(cur)
    return out


def _pieces(text: str, width: int, level: int = 0) -> list[str]:
    """``text`` in parts of at most ``width`` cells, split at the best break points that get there."""
    if level == len(_LEVELS):
        return _hard_split(text, width)
    out: list[str] = []
    for part in _LEVELS[level].split(text):
        if part:
            out.extend([part] if cell_len(part.rstrip()) <= width else _pieces(part, width, level + 1))
    return out


def wrap_text(text: str, width: int, indent: int = INDENT) -> list[str]:
    """``text`` (one line) wrapped to ``width`` cells; continuation lines start with ``indent`` blanks.

    Every character of ``text`` but the blanks at the line ends is kept, in
    order, so joining the lines (blanks removed) gives the text back.
    """
    width = max(width, indent + 4)
    if cell_len(text) <= width:
        return [text]
    lines: list[str] = []
    cur = ""
    for piece in _pieces(text, width - indent):
        limit = width if not lines else width - indent
        if cur and cell_len((cur + piece).rstrip()) > limit:
            lines.append(cur.rstrip())
            cur = piece.lstrip()
        else:
            cur += piece
    if cur.strip() or not lines:
        lines.append(cur.rstrip())
    return [lines[0]] + [" " * indent + line for line in lines[1:]]


def _cell(text: str, width: int) -> list[str]:
    """A wrapped cell, cut in the middle first when it would take more than :data:`MAX_CELL_LINES` lines."""
    lines = wrap_text(text, width)
    if len(lines) > MAX_CELL_LINES:
        lines = wrap_text(shorten(text, max((width - INDENT) * (MAX_CELL_LINES - 1), 8)), width)
    return lines


def _pad(text: str, width: int, justify: str) -> str:
    room = max(width - cell_len(text), 0)
    return " " * room + text if justify == "right" else text + " " * room


def _widths(heads: Sequence[str], kinds: Sequence[str], cells: Sequence[Sequence[str]], width: int) -> list[int] | None:
    """Each column's width, or None when the table cannot be drawn at ``width`` without stacking."""
    n = len(heads)
    natural = [max([cell_len(heads[i])] + [cell_len(r[i]) for r in cells]) for i in range(n)]
    flex = [i for i in range(n) if kinds[i] == "wrap"]
    fixed = sum(natural[i] for i in range(n) if i not in flex) + GAP * (n - 1)
    widths = list(natural)
    while flex and fixed + sum(widths[i] for i in flex) > width:
        j = max(flex, key=lambda i: widths[i])
        if widths[j] <= 1:
            break
        widths[j] -= 1
    if fixed + sum(widths[i] for i in flex) > width:
        return None
    if any(widths[i] < min(natural[i], max(MIN_WRAP, cell_len(heads[i]))) for i in flex):
        return None
    return widths


def table_lines(columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[object]], width: int, header: bool = True) -> tuple[list[Text], bool]:
    """The lines of a table that fits ``width`` (see the module doc), and whether it was stacked.

    ``columns`` are (header, kind), kind one of ``"left"``, ``"right"`` (kept
    whole on one line) or ``"wrap"`` (wrapped to the width left). Cell text
    is made inert (:func:`gpuprof.render.safe.visible`) here.
    """
    from rich.text import Text

    heads = [h for h, _ in columns]
    kinds = [k for _, k in columns]
    cells = [[clip(visible(c)) for c in row] for row in rows]
    widths = _widths(heads, kinds, cells, width)
    if widths is None:
        return _stacked(columns, cells, width), True
    out: list[Text] = []
    if header:
        out.append(Text((" " * GAP).join(_pad(h, w, "right" if k == "right" else "left") for h, w, k in zip(heads, widths, kinds)).rstrip(), style="bold"))
        out.append(Text((" " * GAP).join("─" * w for w in widths)))
    for r in cells:
        parts = [_cell(c, w) if k == "wrap" else [c] for c, w, k in zip(r, widths, kinds)]
        for n in range(max(len(p) for p in parts)):
            line = (" " * GAP).join(_pad(p[n] if n < len(p) else "", w, "right" if k == "right" else "left") for p, w, k in zip(parts, widths, kinds))
            out.append(Text(line.rstrip()))
    return out, False


def _stacked(columns: Sequence[tuple[str, str]], cells: list[list[str]], width: int) -> list[Text]:
    """The narrow form: per row, its lead cell (the first wrapped column) then ``header value`` pairs, indented."""
    from rich.text import Text

    kinds = [k for _, k in columns]
    lead = kinds.index("wrap") if "wrap" in kinds else 0
    inner = max(width - INDENT, 8)
    out: list[Text] = []
    for r in cells:
        # the lead cell's own continuation lines are flush left: only the pairs below it are indented;
        # a short lead (a rank number) keeps its header ("rank 0"), a name is clear without one
        first = r[lead] if kinds[lead] == "wrap" or not columns[lead][0] else f"{columns[lead][0]} {r[lead]}"
        for line in _cell(first, width) if cell_len(first) > width else [first]:
            out.append(Text(line.lstrip(), style="bold"))
        packed: list[str] = []
        joinable = False  # the last line holds whole short pairs only: another may follow on it
        for i, (head, _) in enumerate(columns):
            if i == lead:
                continue
            piece = f"{head} {r[i]}" if head else r[i]
            if joinable and cell_len(packed[-1]) + 2 + cell_len(piece) <= inner:
                packed[-1] += "  " + piece
            else:
                lines = _cell(piece, inner)
                packed.extend(lines)
                joinable = len(lines) == 1
        out.extend(Text(" " * INDENT + line) for line in packed)
    return out


def emit_table(console: Console, title: str, columns: Sequence[tuple[str, str]], rows: Sequence[Sequence[object]], header: bool = True) -> None:
    """Print ``title`` (bold, wrapped) and the table of :func:`table_lines` at ``console.width``
    (``header`` False: no header line and rule, for key/value lists)."""
    from rich.text import Text

    if title:
        for head in wrap_text(title, console.width):
            console.print(Text(head, style="bold"))
    lines, _ = table_lines(columns, rows, console.width, header=header)
    for line in lines:
        console.print(line, no_wrap=True, overflow="ignore", crop=False)


_ITEM = re.compile(r"^(?:[-*]|\d+\.)\s+")


def reflow(doc: str, width: int) -> list[str]:
    """``doc`` (plain paragraphs, ``-``/``*``/``1.`` list items whose lines go on indented, and
    indented verbatim lines) re-wrapped to ``width``: a paragraph's lines are joined and wrapped
    at blanks, a list item wraps under its own text, a verbatim line is kept (and continues
    indented only when it is wider than ``width``)."""
    out: list[str] = []
    for block in re.split(r"\n[ \t]*\n", doc.strip("\n")):
        units: list[list[str]] = []  # [kind, prefix, text]
        for line in block.splitlines():
            item = _ITEM.match(line)
            last = units[-1] if units else None
            if item:
                units.append(["item", item.group(0), line[item.end():].strip()])
            elif last and last[0] == "item" and line.startswith(" "):
                last[2] += " " + line.strip()
            elif line.startswith((" ", "\t")):
                units.append(["verbatim", "", line.rstrip()])
            elif last and last[0] == "para":
                last[2] += " " + line.strip()
            else:
                units.append(["para", "", line.strip()])
        if out:
            out.append("")
        for kind, prefix, text in units:
            if kind == "verbatim":
                lead = len(text) - len(text.lstrip())
                out.extend(wrap_text(text, width, indent=lead + 4))
            else:
                out.extend(wrap_text(prefix + " ".join(text.split()), width, indent=len(prefix)))
    return out
