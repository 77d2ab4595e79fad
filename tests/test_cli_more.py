"""The `woodpecker` command, issue 76's smaller things: `--version`, `run`/`bench` on an .onnx
reusing the sessions' plan cache, and `bench`'s headline saying when the plan is a library's
session and when the ratio is within the rounds' noise."""

from __future__ import annotations

import pytest

from woodpecker.cli import main
from woodpecker.version import __version__


def test_version_prints_woodpeckers_version_and_exits_0(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"woodpecker {__version__}"
