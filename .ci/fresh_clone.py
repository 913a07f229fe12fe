"""Run the README's two set-up commands as a new user does: a fresh clone, a fresh venv, nothing beside it.

CI's other passes run in the development checkout, with its packages installed and the real data beside it.
A new user has neither: this clones the commit under test into an empty temporary folder (no ``../shared``
beside it), makes a fresh ``python3 -m venv`` there, and runs README.md's command 1 and command 2 exactly as
the "Set up: two commands" section writes them (read from README.md now, so this step and the README cannot
drift apart), each in bash from the clone's root with the venv first on ``PATH``. A command passes when it
exits as the README says: every step of its ``&&`` chain 0, but the last, which exits as its ``# exit N``
comment says (command 1's ``gpuprof analyze`` exits 1: the sample's findings; a failed install before it
exits 1 too, and fails here).
Exit 0 when both pass, 1 when either fails.

The environment is the user's, less what only a developer has: ``PYTHONPATH`` and every ``GPUPROF_*``
variable (``GPUPROF_SHARED_TRACES`` would show the clone the real data) are removed. pip's configuration,
index and cache are kept (``HOME``, ``PIP_*``): the venv installs torch's local CPU wheel and the extras
from them, not from the network; most of the step is the fast suite's second run.

Usage: ``python3 .ci/fresh_clone.py`` (from anywhere in the checkout; ``--print`` only prints the commands).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SECTION = "## Set up: two commands"
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
EXIT = re.compile(r"#\s*exit\s+(\d+)\s*$")


def readme_commands(readme: str) -> list[tuple[str, int]]:
    """The set-up section's commands, in order, each with the exit code the README gives it (0 unless
    ``# exit N`` ends it): every non-comment line of the section's shell blocks, ``\\`` continuations joined."""
    at = readme.index(SECTION)
    end = readme.find("\n## ", at + len(SECTION))
    section = readme[at:end if end >= 0 else len(readme)]
    commands: list[tuple[str, int]] = []
    for info, body in FENCE.findall(section):
        if info.split()[:1] != ["bash"]:
            continue
        text = re.sub(r"\\\n\s*", " ", body)  # a line ending in \ goes on on the next
        for line in text.splitlines():
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = EXIT.search(line)
            commands.append((line[:m.start()].rstrip() if m else line, int(m.group(1)) if m else 0))
    if len(commands) != 2:
        raise SystemExit(f"fresh clone: README.md's {SECTION!r} holds {len(commands)} commands, not 2")
    return commands


def _user_env(venv: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("GPUPROF_") and k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def main(argv: list[str]) -> int:
    commands = readme_commands((REPO / "README.md").read_text(encoding="utf-8"))
    if "--print" in argv:
        for cmd, code in commands:
            print(f"{cmd}    # exit {code}")
        return 0
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()
    work = Path(tempfile.mkdtemp(prefix="gpuprof-fresh-"))
    try:
        clone = work / "gpuprof"  # nothing beside it: no ../shared
        subprocess.run(["git", "clone", "-q", "--no-checkout", str(REPO), str(clone)], check=True)
        subprocess.run(["git", "-c", "advice.detachedHead=false", "checkout", "-q", head], cwd=clone, check=True)
        venv = work / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        env = _user_env(venv)
        print(f"fresh clone: {head[:12]} in {clone}, venv {venv}", flush=True)
        failed = []
        for i, (cmd, want) in enumerate(commands, 1):
            # `a && b  # exit 1`: a must succeed and b exit 1 (a failed install also exits 1: not a pass)
            parts = cmd.split(" && ")
            for j, part in enumerate(parts):
                expected = want if j == len(parts) - 1 else 0
                print(f"fresh clone: command {i}: {part}", flush=True)
                got = subprocess.run(["bash", "-c", part], cwd=clone, env=env).returncode
                print(f"fresh clone: command {i} exited {got} (the README says {expected})", flush=True)
                if got != expected:
                    failed.append(f"command {i} ({part.split()[0]} ... {part.split()[-1]}) exited {got}, not {expected}")
                    break
        print("fresh clone: " + ("; ".join(failed) if failed else "both README set-up commands passed"), flush=True)
        return 1 if failed else 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
