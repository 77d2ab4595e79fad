"""Registry entries are typed lazy references (woodpecker/lazy.py): imported when used, their
third-party requirements first."""

from __future__ import annotations

import pytest

from woodpecker.engines.registry import REGISTRY, engine_class
from woodpecker.lazy import Lazy
from woodpecker.tune.searchers import SEARCHERS


def test_a_reference_loads_its_dotted_attribute():
    assert Lazy("woodpecker.options", "ScheduleKind.MEMORY").load().value == "memory"


def test_a_missing_requirement_is_named_before_the_module_is_imported():
    with pytest.raises(ImportError) as e:
        Lazy("woodpecker.options", "ScheduleKind", ("no_such_package_here",)).load()
    assert e.value.name == "no_such_package_here"


def test_every_registered_engine_and_searcher_resolves():
    for name, entry in REGISTRY.items():
        assert isinstance(entry, Lazy) and engine_class(name).__name__ == entry.attr
    for entry in SEARCHERS.values():
        assert isinstance(entry, Lazy) and callable(entry.load())
