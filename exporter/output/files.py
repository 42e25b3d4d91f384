"""File helpers: write a file so that readers see the old one or the complete new one, never a part.

Temporary files and folders are named ``.tmp-<pid>-…`` (`temporary_prefix`), so the ones a killed
process left behind can be told from those of a process still writing (`remove_stale_temporaries`).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile

_TEMPORARY = re.compile(r"\.tmp-(\d+)-")


def temporary_prefix(name: str = "") -> str:
    """The prefix of this process's temporary files (`name` is a hint for readers)."""
    return f".tmp-{os.getpid()}-{name + '-' if name else ''}"


def remove_stale_temporaries(directory: str, pid: int | None = None) -> None:
    """Remove the temporary files and folders in `directory` that process `pid` left behind, or
    (without `pid`) those of every process that is no longer running."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        match = _TEMPORARY.match(name)
        if match and (int(match[1]) == pid if pid is not None else not _running(int(match[1]))):
            path = os.path.join(directory, name)
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:
                try:
                    os.remove(path)
                except OSError:
                    pass


def umask() -> int:
    """The process's file mode creation mask."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


class atomic_path:
    """A temporary path beside `path` that is renamed onto it when the block succeeds."""

    def __init__(self, path: str) -> None:
        self.path = os.path.abspath(path)

    def __enter__(self) -> str:
        directory = os.path.dirname(self.path)
        os.makedirs(directory, exist_ok=True)
        fd, self.tmp = tempfile.mkstemp(dir=directory, prefix=temporary_prefix(), suffix=os.path.basename(self.path))
        os.close(fd)
        return self.tmp

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            if exc_type is None:
                os.chmod(self.tmp, 0o666 & ~umask())  # as open() would create it (mkstemp makes it private)
                os.replace(self.tmp, self.path)
        finally:
            if os.path.exists(self.tmp):
                os.remove(self.tmp)
