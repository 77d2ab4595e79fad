"""Structure kept as ARCHITECTURE.md states it: no engine named by a string literal above
engines/, no schedule kind compared as a string, no module over 450 lines. (The layer
contract itself is import-linter's, run by `make test`.)"""

from __future__ import annotations

import ast
from pathlib import Path

from woodpecker.engines.names import ALL
from woodpecker.options import SCHEDULES

ROOT = Path(__file__).resolve().parents[1] / "woodpecker"
# Version reports list Python distributions, some of which share an engine's name.
DISTRIBUTION_LISTS = {"tune/tuner.py", "bench/runners.py"}


def _modules():
    return sorted(p for p in ROOT.rglob("*.py"))


def test_no_engine_name_literals_outside_engines():
    found = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel.startswith("engines/") or rel in DISTRIBUTION_LISTS:
            continue
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in ALL and \
                    id(node) not in docstrings:
                found.append(f"{rel}:{node.lineno} {node.value!r}")
    assert found == []


def test_no_schedule_kind_compared_as_a_string():
    """Schedule kinds are `options.ScheduleKind` members, compared by identity; only the enum
    (options.py) spells them. A template knob named "parallel" is a dict key, not compared."""
    found = []
    for path in _modules():
        rel = path.relative_to(ROOT).as_posix()
        if rel == "options.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Compare):
                continue
            parts = [node.left, *node.comparators]
            for part in parts:
                items = part.elts if isinstance(part, (ast.Tuple, ast.List, ast.Set)) \
                    else [part]
                if any(isinstance(x, ast.Constant) and x.value in SCHEDULES for x in items):
                    found.append(f"{rel}:{node.lineno}")
    assert found == []


def test_engine_names_in_distribution_lists_are_package_names_only():
    """The two files let through above name engines only inside lists of distributions."""
    for rel in DISTRIBUTION_LISTS:
        tree = ast.parse((ROOT / rel).read_text())
        in_tuples = {id(e) for node in ast.walk(tree) if isinstance(node, ast.Tuple)
                     for e in node.elts}
        strays = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Constant)
                  and node.value in ALL and id(node) not in in_tuples]
        assert strays == [], rel


def test_no_module_over_450_lines():
    long = [(p.relative_to(ROOT).as_posix(), n) for p in _modules()
            if (n := len(p.read_text().splitlines())) > 450]
    assert long == []
