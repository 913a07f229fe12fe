"""Hostile-input corpus shared by the security tests.

Names in traces and snapshots come from strangers (a colleague's snapshot, a
trace downloaded from an issue). Every renderer and writer must treat these as
plain data: no script may run, no terminal escape may reach the terminal, no
markup may escape its code span, and the output must still render.

Scripts in the corpus set ``window.__gpuprof_pwned`` so a browser test can
check that none ran.
"""

from __future__ import annotations

import pytest

PWNED = "window.__gpuprof_pwned=1"

#: Names aimed at HTML pages (attribute and element break-outs, parser states).
HTML_HOSTILE = [
    f"a.py' tabindex='1' autofocus onfocus='{PWNED}'",
    f'b.py" tabindex="1" autofocus onfocus="{PWNED}"',
    f"</script><script>{PWNED}</script>",
    "<!--<script>",
    f"<img src=x onerror=\"{PWNED}\">",
    f"<svg onload={PWNED}>",
    f"javascript:{PWNED}",
    "line\u2028separator\u2029paragraph",
    "${" + PWNED + "}`${" + PWNED + "}`",
    "{{x}}{x}%s%(x)s$x",
    "]]></script><!--",
]

#: Names aimed at terminals and markdown (escape sequences, control characters, markup).
TEXT_HOSTILE = [
    "clear\x1b[2Jscreen",
    "title\x1b]0;pwned\x07set",
    "link\x1b]8;;http://evil.example/\x1b\\click\x1b]8;;\x1b\\",
    "csi\x9b31mc1",
    "nul\x00del\x7fbell\x07",
    "carriage\rreturn",
    "back\bspace",
    "double``backtick",
    "single`tick",
    "pipe|in|table",
    "[bold red]rich markup[/]",
    "[link=http://evil.example/]rich link[/link]",
    "<script>alert(1)</script>",
    "[md link](javascript:alert(1))",
]

#: A name far longer than any real one.
HUGE_NAME = "aten::" + "x" * 200_000


@pytest.fixture
def html_hostile() -> list[str]:
    return list(HTML_HOSTILE)


@pytest.fixture
def text_hostile() -> list[str]:
    return list(TEXT_HOSTILE)


@pytest.fixture
def hostile_names() -> list[str]:
    """Every hostile name, HTML and text, plus one huge name."""
    return HTML_HOSTILE + TEXT_HOSTILE + [HUGE_NAME]
