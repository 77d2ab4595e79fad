"""A reference to something imported only when it is used: a registry entry names its module
and attribute as data, typed, instead of a "module:attr" string split at each use.

Contract: `Lazy(module, attr, requires)`; `load()` imports what `requires` names first (the
third-party modules it needs: an ImportError then names the missing one, before the module's
own imports start), then the module, and returns the (dotted) attribute. The engine registry
(engines/registry.py) and the searchers' (tune/searchers/) are built of them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Lazy:
    module: str
    attr: str
    requires: tuple[str, ...] = ()

    def load(self) -> Any:
        for dependency in self.requires:
            importlib.import_module(dependency)
        found: Any = importlib.import_module(self.module)
        for part in self.attr.split("."):
            found = getattr(found, part)
        return found
