"""Every code's long form ships inside the package, and docs/ agrees with the registry.

``gpuprof explain`` used to read 30 of its long forms from ``../docs`` beside the
source tree, so an installed wheel lacked them. They are package data now
(gpuprof/data/explanations.md, made from docs/ by ``python3 tests/longforms.py --write``);
these tests check that file and docs/codes.md's code table against docs/ and the
registry, and that a wheel installed in a fresh venv (no site-packages but its
four dependencies) explains every code.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from gpuprof.codes import _packaged_docs, catalogue, explain_text

_spec = importlib.util.spec_from_file_location("longforms", Path(__file__).with_name("longforms.py"))
assert _spec is not None and _spec.loader is not None
longforms = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(longforms)

REPO = Path(__file__).resolve().parents[1]
FIX = "run `python3 tests/longforms.py --write` and commit the result"


def test_packaged_long_forms_match_docs() -> None:
    want = longforms.from_docs(longforms.undocumented())
    assert longforms.PACKAGED.read_text(encoding="utf-8") == want, f"gpuprof/data/explanations.md is stale: {FIX}"


def test_codes_md_table_matches_the_registry() -> None:
    text = longforms.CODES_MD.read_text(encoding="utf-8")
    assert longforms.BEGIN in text and longforms.END in text
    assert longforms.codes_md_with_table(text, longforms.codes_table()) == text, f"docs/codes.md's table is stale: {FIX}"
    for spec in catalogue():
        assert f"| {spec.code} | {spec.name} |" in text


def test_every_code_has_a_long_form_from_the_package() -> None:
    packaged = _packaged_docs()
    for spec in catalogue():
        assert spec.doc and "no long explanation is packaged" not in spec.doc, spec.code
        assert spec.doc in explain_text(spec)
        if spec.docs_page:  # a code without a doc string: its long form is the packaged one
            assert spec.doc == packaged[spec.code]


@pytest.mark.slow
def test_explain_every_code_from_a_wheel_in_a_fresh_venv(tmp_path: Path) -> None:
    """Build the wheel, install it with its four dependencies only into a plain venv, explain every code."""
    wheels = tmp_path / "wheels"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(wheels),
                    str(REPO)], check=True, env=env, cwd=tmp_path, timeout=300)
    (wheel,) = wheels.glob("gpuprof-*.whl")
    # the wheel holds the package alone, no test helper (tests/support/gpuprof_testing; tests/test_package.py: the sources)
    with zipfile.ZipFile(wheel) as whl:
        names = whl.namelist()
    assert {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")} == {"gpuprof"}
    assert not [n for n in names if "testing" in n.split("/")], [n for n in names if "testing" in n]
    # the dependencies as wheels, from pip's cache or its configured index (once per machine)
    house = Path(os.environ.get("GPUPROF_TEST_WHEELHOUSE", Path.home() / ".cache" / "gpuprof-test-wheels"))
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "-d", str(house), "msgspec", "numpy", "click", "rich"],
                   check=True, env=env, cwd=tmp_path, timeout=300)
    venv.create(tmp_path / "venv", with_pip=True, system_site_packages=False)
    py = tmp_path / "venv" / "bin" / "python"
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(house), str(wheel)],
                   check=True, env=env, cwd=tmp_path, timeout=300)
    codes = [s.code for s in catalogue()]
    script = (
        "import sys, gpuprof, gpuprof.codes as c\n"
        "assert 'site-packages' in gpuprof.__file__, gpuprof.__file__\n"
        "from click.testing import CliRunner\n"
        "from gpuprof.cli import cli\n"
        "for code in sys.argv[1:]:\n"
        "    r = CliRunner().invoke(cli, ['explain', code])\n"
        "    assert r.exit_code == 0, (code, r.output)\n"
        "    assert 'no long explanation is packaged' not in r.output and 'not found beside' not in r.output, code\n"
        "    (spec,) = c.lookup(code)\n"
        "    words = lambda t: ' '.join(t.split())  # explain re-wraps prose to the width: compare the words\n"
        "    assert spec.doc and words(spec.doc) in words(r.output), code\n"
        "print(len(sys.argv) - 1)\n"
    )
    out = subprocess.run([str(py), "-c", script, *codes], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == str(len(codes))
    # and the gpuprof script itself, for one code of each kind of long form (doc string, packaged)
    script_path = tmp_path / "venv" / "bin" / "gpuprof"
    for code in ("GP101", "GP601", "GP512"):
        res = subprocess.run([str(script_path), "explain", code], env=env, cwd=tmp_path, capture_output=True,
                             text=True, timeout=60)
        assert res.returncode == 0 and code in res.stdout, res.stderr
