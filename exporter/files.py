"""File helpers: write a file so that readers see the old one or the complete new one, never a part."""

from __future__ import annotations

import os
import tempfile


class atomic_path:
    """A temporary path beside `path` that is renamed onto it when the block succeeds."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)

    def __enter__(self) -> str:
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(self.path))
        os.close(fd)
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                os.replace(self.tmp, self.path)
        finally:
            if os.path.exists(self.tmp):
                os.remove(self.tmp)
