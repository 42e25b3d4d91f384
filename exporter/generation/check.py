"""The generation check (FXE0022): greedy generation in onnxruntime with the exported KV cache,
token for token against ``model.generate(do_sample=False)``.

`greedy_generate` is the loop over the documented names (prefill with a past of length 0, then one
token per step, presents fed back as pasts); `check_generation` compares it with eager generation
and reports the first divergence: its step, row, the expected and the produced token and the logit
margins. A divergence where eager PyTorch's top two logits are within `TIE_TOLERANCE` is a near
tie (a warning): rounding alone may pick either token.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

import numpy as np
import torch

from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.errors import is_out_of_memory
from exporter.generation.topk_ties import TopKTies

TIE_TOLERANCE = {torch.float32: 1e-3, torch.float64: 1e-6, torch.float16: 5e-2, torch.bfloat16: 1e-1}
_NUMPY_DTYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64}


@dataclasses.dataclass(frozen=True)
class Divergence:
    step: int  # 0: the token the prefill produced; k: the k-th decode step
    row: int
    expected: int  # eager generate()'s token
    produced: int  # onnxruntime's token
    margin: float  # onnxruntime's logit of `produced` minus its logit of `expected`
    eager_margin: float  # eager's logit of `expected` minus its logit of `produced`
    near_tie: bool


@dataclasses.dataclass(frozen=True)
class Parity:
    """The outcome of a generation check."""

    batch: int
    steps: int  # tokens compared per row
    expected: list[list[int]]
    produced: list[list[int]]
    divergence: Divergence | None
    prefill_ms: float
    decode_ms_per_token: float
    error: str | None = None  # onnxruntime failed to run the model

    @property
    def matched(self) -> bool:
        return self.divergence is None and self.error is None

    def summary(self) -> str:
        if self.error is not None:
            return f"generation check failed: {self.error}"
        if self.divergence is None:
            return f"{self.steps} greedy tokens for {self.batch} prompt{'s' if self.batch > 1 else ''} identical to generate()"
        d = self.divergence
        return f"generation diverges at step {d.step} (row {d.row}): expected token {d.expected}, produced {d.produced}"


@dataclasses.dataclass
class GreedyResult:
    tokens: np.ndarray  # (batch, steps) the generated tokens (pad after a row's end of sequence)
    logits: list[np.ndarray]  # per step, (batch, vocab) of the last position
    prefill_ms: float
    decode_ms: list[float]


class GreedySteps:
    """The steps of a greedy generation in onnxruntime: each runs `session`, picks every unfinished row's
    most likely token (pad once a row has ended) and records it with its logits and time."""

    def __init__(self, session: Any, batch: int, eos_token_ids: set[int], pad_token_id: int) -> None:
        self.session, self.eos_token_ids, self.pad_token_id = session, list(eos_token_ids), pad_token_id
        self.output_names = [o.name for o in session.get_outputs()]
        self.unfinished = np.ones(batch, dtype=bool)
        self.tokens: list[np.ndarray] = []
        self.logits: list[np.ndarray] = []
        self.times: list[float] = []

    def step(self, feeds: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], np.ndarray]:
        """Run one step on `feeds`; the session's outputs by name and the tokens chosen."""
        start = time.perf_counter()
        outputs = dict(zip(self.output_names, self.session.run(None, feeds)))
        self.times.append((time.perf_counter() - start) * 1000)
        logits = outputs["logits"][:, -1, :].astype(np.float32)
        token = np.where(self.unfinished, logits.argmax(-1), self.pad_token_id)
        self.tokens.append(token)
        self.logits.append(logits)
        self.unfinished &= ~np.isin(token, self.eos_token_ids)
        return outputs, token

    @property
    def done(self) -> bool:
        return not self.unfinished.any()

    def result(self) -> GreedyResult:
        return GreedyResult(np.stack(self.tokens, axis=1), self.logits, self.times[0], self.times[1:])


def empty_pasts(inputs: dict[str, Any], names: list[str], batch: int) -> dict[str, np.ndarray]:
    """The first step's past key/values, of length 0, for the session inputs `names`."""
    pasts = {}
    for name in names:
        _, heads, _, size = inputs[name].shape
        pasts[name] = np.zeros((batch, heads, 0, size), dtype=_NUMPY_DTYPES[inputs[name].type])
    return pasts


def greedy_generate(
    session: Any,
    input_ids: np.ndarray,
    attention_mask: np.ndarray,
    max_new_tokens: int,
    eos_token_ids: set[int],
    pad_token_id: int,
) -> GreedyResult:
    """Greedy generation with an onnxruntime session of an exported model (left-padded batches)."""
    inputs = {i.name: i for i in session.get_inputs()}
    past_names = sorted(
        (n for n in inputs if n.startswith("past_key_values.")),
        key=lambda n: (int(n.split(".")[1]), n.endswith(".value")),
    )
    batch = input_ids.shape[0]
    feeds = empty_pasts(inputs, past_names, batch)
    mask = attention_mask.astype(np.int64)
    ids = input_ids.astype(np.int64)
    positions = np.where(mask == 0, 1, np.cumsum(mask, axis=-1) - 1)  # as transformers' generate
    steps = GreedySteps(session, batch, eos_token_ids, pad_token_id)
    for _ in range(max_new_tokens):
        feeds |= {"input_ids": ids, "attention_mask": mask}
        if "position_ids" in inputs:
            feeds["position_ids"] = positions
        outputs, token = steps.step(feeds)
        if steps.done:
            break
        for name in past_names:
            feeds[name] = outputs[name.replace("past_key_values.", "present.")]
        ids = token[:, None].astype(np.int64)
        mask = np.concatenate([mask, np.ones((batch, 1), dtype=np.int64)], axis=-1)
        positions = positions[:, -1:] + 1
    return steps.result()


def default_prompt(vocab_size: int, pad_token_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A left-padded batch of two random prompts (7 and 4 tokens), fixed by seed."""
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab_size, (2, 7), generator=generator)
    ids[ids == pad_token_id] = (pad_token_id + 1) % vocab_size
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ids[1, :3] = pad_token_id
    return ids, mask


def check_generation(
    model: torch.nn.Module,
    onnx_path: str,
    ctx: DiagnosticContext,
    prompt: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    max_new_tokens: int = 16,
) -> Parity | None:
    """Generate greedily with the exported model and eagerly; report the outcome under FXE0022
    (None: onnxruntime has no kernels to run the model, e.g. bf16 on CPU, a warning)."""
    import onnxruntime as ort

    generation_config = model.generation_config
    eos = generation_config.eos_token_id if generation_config.eos_token_id is not None else model.config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    pad = generation_config.pad_token_id if generation_config.pad_token_id is not None else min(eos_ids, default=0)
    if prompt is None:
        prompt, attention_mask = default_prompt(model.config.get_text_config(decoder=True).vocab_size, pad)
    if attention_mask is None:
        attention_mask = torch.ones_like(prompt)
    ties = TopKTies(model, prompt.shape[0])
    try:  # on copies: a forward that mutates its inputs must not change what onnxruntime gets
        with torch.no_grad(), ties:
            eager = model.generate(
                prompt.clone(),
                attention_mask=attention_mask.clone(),
                max_new_tokens=max_new_tokens,
                min_new_tokens=0,
                do_sample=False,
                num_beams=1,
                pad_token_id=pad,
                output_logits=True,
                return_dict_in_generate=True,
            )
    except Exception as e:
        return eager_generation_failed(ctx, e)
    expected = eager.sequences[:, prompt.shape[1] :].numpy()
    eager_logits = [x.float().numpy() for x in eager.logits]
    batch = prompt.shape[0]
    try:
        session = ort.InferenceSession(onnx_path, providers=["CPUExecutionProvider"])
        result = greedy_generate(session, prompt.numpy(), attention_mask.numpy(), max_new_tokens, eos_ids, pad)
    except Exception as e:
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if "NOT_IMPLEMENTED" in reason:  # no CPU kernel (bf16): the model may be right, it cannot be run here
            message = f"Generation check skipped: onnxruntime's CPU provider cannot run this model ({reason})."
            ctx.report(rules.GENERATION_DIVERGENCE, Level.WARNING, message, generationCheck="skipped")
            return None
        message = f"The exported model does not generate in onnxruntime: {reason}"
        ctx.report(rules.GENERATION_DIVERGENCE, Level.ERROR, message, generationCheck="failed")
        return Parity(batch, 0, expected.tolist(), [], None, 0.0, 0.0, error=message)
    tolerance = TIE_TOLERANCE.get(next(model.parameters()).dtype, 1e-3)
    return report(ctx, expected, eager_logits, result, tolerance, ties)


def eager_generation_failed(ctx: DiagnosticContext, error: Exception) -> None:
    """Report that the PyTorch model's own generation raised `error` (a warning, at the user's frame if any):
    without its tokens the exported model has nothing to be checked against. Out of memory is re-raised."""
    from exporter.capture.extractor import user_frames_of

    if is_out_of_memory(error):
        raise error
    first = (str(error).strip().splitlines() or [""])[0]
    ctx.report(
        rules.GENERATION_DIVERGENCE,
        Level.WARNING,
        f"Generation check skipped: the PyTorch model's generate() raises {type(error).__name__}: {first}; without "
        "its tokens there is nothing to check the exported model against (the folder is written unchecked).",
        stack=user_frames_of(error),
        exception=error,
        generationCheck="skipped",
    )


def report(
    ctx: DiagnosticContext,
    expected: np.ndarray,
    eager_logits: list[np.ndarray],
    result: GreedyResult,
    tolerance: float,
    ties: TopKTies | None = None,
) -> Parity:
    """Compare onnxruntime's greedy `result` with eager generation's tokens and logits; report the
    outcome under FXE0022. A divergence within `tolerance` of a tie, or in a row whose top-k chose among
    equal values at that step or before (`ties`), is a warning."""
    produced = result.tokens
    batch = expected.shape[0]
    steps = min(expected.shape[1], produced.shape[1])
    divergence = first_divergence(expected, produced, eager_logits, result.logits, steps, tolerance)
    decode_ms = float(np.mean(result.decode_ms)) if result.decode_ms else 0.0
    parity = Parity(batch, steps, expected.tolist(), produced.tolist(), divergence, result.prefill_ms, decode_ms)
    properties = {"batch": batch, "steps": steps, "expectedTokens": parity.expected, "producedTokens": parity.produced}
    if divergence is None and expected.shape[1] != produced.shape[1]:  # one side ended every row earlier
        divergence_message = (
            f"Generation ends after {produced.shape[1]} tokens in onnxruntime, after {expected.shape[1]} in generate()."
        )
        ctx.report(rules.GENERATION_DIVERGENCE, Level.ERROR, divergence_message, generationCheck="failed", **properties)
        return dataclasses.replace(parity, error=divergence_message)
    if divergence is None:
        ctx.report(
            rules.GENERATION_DIVERGENCE,
            Level.NOTE,
            f"Generation check passed: {steps} greedy tokens for {batch} prompts in onnxruntime with the KV cache, identical to generate(do_sample=False).",
            generationCheck="passed",
            **properties,
        )
        return parity
    d = divergence
    tied_topk = ties is not None and ties.explains(d.step, d.row)
    message = (
        f"Generation diverges at step {d.step} (prompt {d.row}): generate() chose token {d.expected}, onnxruntime token {d.produced}; "
        f"onnxruntime's logit margin {d.margin:.4g} (eager's {d.eager_margin:.4g})"
        + (
            ": a near tie, rounding alone may decide it."
            if d.near_tie
            else f", after a top-k ({ties.where}) chose among equal values in this prompt: PyTorch breaks such "
            "ties by its sort, onnxruntime's TopK by index (a router given a zero hidden state picks other "
            "experts), and neither is wrong."
            if tied_topk
            else "."
        )
    )
    ctx.report(
        rules.GENERATION_DIVERGENCE,
        Level.WARNING if d.near_tie or tied_topk else Level.ERROR,
        message,
        generationCheck="near tie" if d.near_tie else "tie in top-k" if tied_topk else "diverged",
        step=d.step,
        row=d.row,
        expectedToken=d.expected,
        producedToken=d.produced,
        logitMargin=d.margin,
        eagerLogitMargin=d.eager_margin,
        **properties,
    )
    return parity


def first_divergence(
    expected: np.ndarray,
    produced: np.ndarray,
    eager_logits: list[np.ndarray],
    ort_logits: list[np.ndarray],
    steps: int,
    tolerance: float,
) -> Divergence | None:
    """The first (step, row) whose tokens differ, with its margins; a near tie when eager's logits of
    the two tokens are within `tolerance`."""
    for step in range(steps):
        for row in np.flatnonzero(expected[:, step] != produced[:, step]):
            want, got = int(expected[row, step]), int(produced[row, step])
            eager_margin = float(eager_logits[step][row, want] - eager_logits[step][row, got])
            margin = float(ort_logits[step][row, got] - ort_logits[step][row, want])
            return Divergence(step, int(row), want, got, margin, eager_margin, abs(eager_margin) <= tolerance)
    return None
