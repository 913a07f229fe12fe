"""Every registered rule is a complete, self-documenting unit with a bad and a good test."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from gpuprof.rules.base import Option, all_rules

HERE = Path(__file__).parent


def _test_names() -> set[str]:
    names = set()
    for f in HERE.glob("test_*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test_"):
                names.add(node.name)
    return names


def test_every_rule_has_a_bad_and_a_good_fixture():
    names = _test_names()
    missing = []
    for rule in all_rules():
        code = rule.code.lower()
        for kind in ("bad", "good"):
            if not any(n == f"test_{code}_{kind}" or n.startswith(f"test_{code}_{kind}_") for n in names):
                missing.append(f"test_{code}_{kind}")
    assert not missing, f"rules without fixtures: {missing}"


def test_rules_are_documented_with_stable_codes_and_options():
    rules = all_rules()
    assert len(rules) >= 15, [r.code for r in rules]
    seen_names = set()
    for rule in rules:
        assert re.fullmatch(r"GP[1-9]\d\d", rule.code), rule.code
        assert re.fullmatch(r"[a-z0-9-]+", rule.name), rule.name
        assert rule.name not in seen_names
        seen_names.add(rule.name)
        assert rule.title and len(rule.doc()) > 40
        assert rule.bad_example.strip() and rule.good_example.strip()
        assert rule.bad_example.strip() != rule.good_example.strip()
        for opt in rule.options:
            assert isinstance(opt, Option) and opt.help
            assert opt.parse(str(opt.default)) == opt.default
