"""Top-k selections over equal values while eager PyTorch generates: where a generation check's divergence
may come from (a mixture-of-experts router given a zero hidden state, a padding token's, scores every expert
equally). PyTorch's CPU ``topk`` breaks such ties by its partial sort, onnxruntime's ``TopK`` by index, so
the two pick other experts, and neither is wrong.
"""

from __future__ import annotations

import traceback

import torch
from torch.overrides import TorchFunctionMode

_TOPK = (torch.topk, torch.Tensor.topk)


class TopKTies(TorchFunctionMode):
    """Records, while active, which rows of a batch of `batch` one-token decoding steps (forward calls of
    `model` after the prefill) a top-k over ``[batch, n]`` chose among equal values at its cut (the k-th and
    the next are equal), and where that top-k is called."""

    def __init__(self, model: torch.nn.Module, batch: int) -> None:
        super().__init__()
        self.batch, self.step = batch, -1
        self.rows: dict[int, set[int]] = {}  # decoding step -> rows with a tie
        self.where: str | None = None  # "file:line" of the first tied top-k
        self._model = model

    def _next_step(self, *_) -> None:
        self.step += 1

    def __enter__(self) -> TopKTies:
        self._hook = self._model.register_forward_pre_hook(self._next_step)
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        self._hook.remove()
        return super().__exit__(*exc)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func in _TOPK and self.step > 0 and (rows := _tied_rows(self.batch, *args, **kwargs)):
            self.rows.setdefault(self.step, set()).update(rows)
            if self.where is None:
                caller = traceback.extract_stack(limit=2)[0]
                self.where = f"{caller.filename}:{caller.lineno}"
        return result

    def explains(self, step: int, row: int) -> bool:
        """Whether `row` had a tied top-k at a decoding step up to `step`."""
        return any(row in rows for s, rows in self.rows.items() if s <= step)


def _tied_rows(
    batch: int, values: torch.Tensor, k: int, dim: int = -1, largest: bool = True, sorted: bool = True
) -> list[int]:
    """The rows of a ``[batch, n]`` `values` whose k-th and (k+1)-th along the last axis are equal."""
    if values.dim() != 2 or values.shape[0] != batch or dim not in (-1, 1) or not 0 < k < values.shape[1]:
        return []
    ordered = values.sort(-1, descending=largest).values
    return torch.nonzero(ordered[:, k - 1] == ordered[:, k]).flatten().tolist()
