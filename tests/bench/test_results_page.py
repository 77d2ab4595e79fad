"""The results page and the README's table are what `benchmarks/results_page.py` makes of the
result files (no number typed by hand), and the README stays short."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _page_module():
    spec = importlib.util.spec_from_file_location("results_page",
                                                  ROOT / "benchmarks" / "results_page.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["results_page"] = module      # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_the_results_page_and_the_readme_table_match_the_result_files(capsys):
    page = _page_module()
    assert page.main(["--check"]) == 0, capsys.readouterr().out


def test_every_published_set_names_its_machine_and_an_existing_file():
    page = _page_module()
    for s in page.SETS:
        doc = json.loads((page.RESULTS / s.file).read_text())
        _, summary = page.KINDS[s.kind](doc)
        assert "not recorded" not in summary["machine"], s.key


def test_a_changed_result_changes_the_page(tmp_path, monkeypatch):
    page = _page_module()
    s = next(x for x in page.SETS if x.kind == "open_world")
    doc = json.loads((page.RESULTS / s.file).read_text())
    doc["models"][0]["ratio_to_faster_library"] *= 1.5
    (tmp_path / s.file).write_text(json.dumps(doc))
    before = page.render_page()
    monkeypatch.setattr(page, "RESULTS", tmp_path)
    for other in page.SETS:
        if other.file != s.file:
            (tmp_path / other.file).write_text((ROOT / "benchmarks" / "results" /
                                                other.file).read_text())
    assert page.render_page() != before


def test_the_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 200
