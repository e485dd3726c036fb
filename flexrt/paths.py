"""Where flexrt keeps files between runs (importable by every layer).

The cache folder is ``$FLEXRT_CACHE_DIR``, else ``$XDG_CACHE_HOME/flexrt``, else
``~/.cache/flexrt``, read from the environment at each call. It holds the profiled cost cache
(``profile.json``) and the calibrated ``local`` machine (``local.yaml``).
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV_VAR = "FLEXRT_CACHE_DIR"


def cache_dir() -> Path:
    env = os.environ.get(CACHE_DIR_ENV_VAR)
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "flexrt"
