"""Source locations of FX nodes: the Python stack recorded at capture time, user frames first."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import sysconfig

import torch

from exporter.diagnostics.code import code_of

_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<function>.+)$')


@dataclasses.dataclass(frozen=True)
class Frame:
    path: str
    line: int
    function: str
    snippet: str = ""  # the line's code, as messages quote it: without the user's comment

    def __post_init__(self) -> None:
        object.__setattr__(self, "snippet", code_of(self.snippet).strip())

    @property
    def is_user_code(self) -> bool:
        return is_user_file(self.path)

    def __str__(self) -> str:
        return f"{self.path}:{self.line} in {self.function}"


EXPORTER_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the exporter package itself

_library_roots: set[str] = {
    os.path.realpath(p) + os.sep
    for p in (
        os.path.dirname(torch.__file__),
        EXPORTER_ROOT,
        sysconfig.get_paths()["stdlib"],
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        sysconfig.get_paths()["scripts"],  # console scripts (onnxlens-export, pytest)
    )
}


def add_library_root(path: str) -> None:
    """Treat files under `path` as tooling, not user code (e.g. a server that runs exports)."""
    _library_roots.add(os.path.realpath(path) + os.sep)
    is_user_file.cache_clear()


@functools.lru_cache(maxsize=4096)
def is_user_file(path: str) -> bool:
    """True for the model author's files: not torch, not site-packages, not the exporter."""
    if path.startswith("<"):
        return False
    real = os.path.realpath(path)
    return not real.startswith(tuple(_library_roots)) and "site-packages" not in real


_SITE_PACKAGES = tuple({os.path.realpath(sysconfig.get_paths()[k]) + os.sep for k in ("purelib", "platlib")})
_TOOLING = tuple(os.path.realpath(p) + os.sep for p in (os.path.dirname(torch.__file__), EXPORTER_ROOT))


@functools.lru_cache(maxsize=4096)
def is_tooling(path: str) -> bool:
    """True for torch's and the exporter's own files: the capture, never the model."""
    return os.path.realpath(path).startswith(_TOOLING)


def package_path(path: str) -> str | None:
    """`path` from its installed package on (``transformers/models/t5/modeling_t5.py``) for a file of a
    third-party package that runs a model (not torch's, not the exporter's), else None."""
    if is_tooling(path):
        return None
    real = os.path.realpath(path)
    return next((real[len(root) :] for root in _SITE_PACKAGES if real.startswith(root)), None)


def library_frame(frames: list[Frame]) -> Frame | None:
    """The innermost of `frames` in a package's model code (transformers' ``modeling_*.py``, timm's): where
    messages point when no frame is the user's."""
    return next((f for f in frames if package_path(f.path) is not None), None)


def parse_stack_trace(text: str) -> list[Frame]:
    """Frames of a `traceback`-formatted stack, innermost first."""
    frames: list[Frame] = []
    lines = text.splitlines()
    for i, line in enumerate(lines):
        match = _FRAME.match(line)
        if not match:
            continue
        snippet = ""
        if i + 1 < len(lines) and not _FRAME.match(lines[i + 1]):
            snippet = lines[i + 1]
        frames.append(Frame(match["path"], int(match["line"]), match["function"].strip(), snippet))
    frames.reverse()
    return frames


def stack_of(node: torch.fx.Node) -> list[Frame]:
    """The node's stack, innermost user frame first, then the outer user frames, then the rest."""
    frames = parse_stack_trace(node.meta.get("stack_trace") or "")
    user = [f for f in frames if f.is_user_code]
    return user + [f for f in frames if not f.is_user_code]
