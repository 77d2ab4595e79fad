"""Where Woodpecker caches what it can rebuild (exported zoo models, compiled kernels):
`$WOODPECKER_CACHE`, else the user cache directory of the platform."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    env = os.environ.get("WOODPECKER_CACHE")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("woodpecker"))
