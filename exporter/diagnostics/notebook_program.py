"""A notebook as one program: its Python code cells in notebook order, concatenated, with each line's cell.

The one rule both sides use: the language server exports an open notebook as this program under the
notebook's path (`onnxlens_server.notebooks`), and an export run in a Jupyter kernel maps its cells'
frames to the same lines (`exporter.diagnostics.notebook_frames`). So a location in a notebook is
always (the notebook's path, a line of its program), whoever wrote it.

Each cell's text ends with a newline in the program. IPython syntax keeps its line but not its code:
a cell magic (``%%time``) comments out its whole cell, a line magic or shell escape (``%pip``,
``!ls``) becomes ``pass`` — the program parses and every line keeps its number. Torch-free.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence


@dataclasses.dataclass(frozen=True)
class Program:
    source: str
    starts: tuple[int, ...]  # each cell's first line in `source` (0-based)
    lines: tuple[int, ...]  # each cell's number of lines

    def cell_at(self, line: int) -> tuple[int, int] | None:
        """(cell index, line in the cell) of the program's 0-based `line`; None past the last cell's line."""
        index = bisect.bisect_right(self.starts, line) - 1
        while index >= 0 and self.lines[index] == 0:  # an empty cell holds no line
            index -= 1
        if index < 0 or line >= self.starts[index] + self.lines[index]:
            return None
        return index, line - self.starts[index]

    def line_of(self, cell: int, line: int) -> int:
        """The program's line of `line` of cell `cell`."""
        return self.starts[cell] + line


def program(cells: Sequence[str]) -> Program:
    """The program of these Python cells' texts, in notebook order."""
    parts, starts, lines, start = [], [], [], 0
    for text in cells:
        code = as_python(text)
        parts.append(code)
        starts.append(start)
        lines.append(code.count("\n"))
        start += lines[-1]
    return Program("".join(parts), tuple(starts), tuple(lines))


def as_python(text: str) -> str:
    """A cell's text as Python with the same lines, ending with a newline (empty for an empty cell)."""
    rows = text.splitlines()
    if rows and rows[0].lstrip().startswith("%%"):  # a cell magic: the cell is not Python
        return "".join(f"# {row}\n" for row in rows)
    out = []
    for row in rows:
        code = row.lstrip()
        if code.startswith(("%", "!")):
            out.append(f"{row[: len(row) - len(code)]}pass  # {code}\n")
        else:
            out.append(row + "\n")
    return "".join(out)
