"""The quality report of a non-fp32 generation export (FXE0023): greedy-token agreement with the fp32
PyTorch model and the perplexity change on a fixed text; with a minimum agreement, the most sensitive
weight groups kept at a higher precision until it is met (`quantize_to_agreement`). A lowered model
onnxruntime refuses to load or run is an FXE0023 error (`measured`); the folder is still written.

An fp16 export is also compared with PyTorch's own fp16 model (`half_agreement`): agreeing with fp32 on
`LOSS_MARGIN` fewer tokens than it does is a warning, a loss rounding to fp16 does not explain (a Mixtral
whose expert counts went wrong in fp16 agreed on 40.6 % of its tokens, PyTorch's fp16 model on 100 %).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import itertools
import os
import tempfile
from collections.abc import Callable, Collection, Iterator
from typing import Any, TypeVar

import numpy as np
import onnx_ir as ir
import torch
from onnx_ir.passes.common import InlinePass

from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.generation import quantize
from exporter.options import ExportOptions
from exporter.output.program import ExportOutput

FIXED_TEXT = (
    "The quick brown fox jumps over the lazy dog. A journey of a thousand miles begins with a single step. "
    "Knowledge is power, and time is money; all that glitters is not gold."
)
_TWO_GIB = 2**31
LOSS_MARGIN = 0.1  # agreement an fp16 export may lose beyond PyTorch's own fp16 model before it is a warning
Model = TypeVar("Model")  # what a quantize function returns: a graph, or an encoder's and a decoder's


@dataclasses.dataclass(frozen=True)
class Quality:
    """How the exported model's predictions compare with the fp32 PyTorch model's."""

    precision: str
    agreement: float  # the fraction of greedy tokens the exported model predicts the same
    tokens: int  # greedy tokens compared
    perplexity_fp32: float  # the PyTorch model's on the fixed text
    perplexity: float  # the exported model's
    kept: tuple[str, ...] = ()  # weight groups kept at a higher precision
    pytorch_agreement: float | None = None  # PyTorch's own model at this precision (fp16), for comparison

    @property
    def perplexity_change(self) -> float:
        return self.perplexity / self.perplexity_fp32 - 1.0

    def summary(self) -> str:
        kept = f"; kept higher: {', '.join(self.kept)}" if self.kept else ""
        return (
            f"{self.precision}: {self.agreement:.1%} of {self.tokens} greedy tokens agree with fp32 PyTorch, "
            f"perplexity {self.perplexity_fp32:.4g} -> {self.perplexity:.4g} ({self.perplexity_change:+.1%}){kept}"
        )


class Unmeasured(RuntimeError):
    """onnxruntime refused to load or run an exported model at a lower precision."""


@contextlib.contextmanager
def refusals(precision: str) -> Iterator[None]:
    """Raise onnxruntime's refusal to load or run the `precision` model as `Unmeasured`."""
    from onnxruntime.capi import onnxruntime_pybind11_state as state

    errors = tuple(v for v in vars(state).values() if isinstance(v, type) and issubclass(v, Exception))
    try:
        yield
    except errors as e:
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise Unmeasured(f"onnxruntime cannot run the {precision} model: {type(e).__name__}: {reason}") from e


def measured(ctx: DiagnosticContext, measure: Callable[[], Quality | None]) -> Quality | None:
    """`measure()`; where onnxruntime refuses the model (`Unmeasured`), an FXE0023 error and None."""
    try:
        return measure()
    except Unmeasured as e:
        ctx.report(rules.QUANTIZATION_QUALITY, Level.ERROR, f"{e}.", exception=e)
        return None


@dataclasses.dataclass(frozen=True)
class Reference:
    """The fp32 PyTorch model's greedy continuations and fixed text, computed once."""

    sequences: np.ndarray  # (batch, prompt + new) prompts and greedy continuations
    mask: np.ndarray  # their attention mask
    scored: np.ndarray  # (batch, new) True where a generated token counts (up to a row's end of sequence)
    text: np.ndarray  # (1, length) the fixed text's tokens
    text_log_likelihood: float  # PyTorch's mean log likelihood of `text`
    half_agreement: float | None  # PyTorch's own fp16 model's agreement (an fp16 export's reference)


def reference(
    model: torch.nn.Module,
    prompt: torch.Tensor,
    attention_mask: torch.Tensor,
    max_new_tokens: int,
    tokenizer: Any,
    precision: str,
) -> Reference:
    """Greedy-generate from `prompt` with the fp32 PyTorch model; the fixed text is `FIXED_TEXT`
    tokenized (or, without a tokenizer, the first prompt with its continuation). For an fp16 export,
    PyTorch's own fp16 model's agreement with those tokens too."""
    with torch.no_grad():
        sequences = model.generate(
            prompt,
            attention_mask=attention_mask,
            max_new_tokens=max_new_tokens,
            min_new_tokens=max_new_tokens,
            do_sample=False,
            num_beams=1,
            pad_token_id=0,
        )
    new = sequences.shape[1] - prompt.shape[1]
    mask = torch.cat([attention_mask, torch.ones(prompt.shape[0], new, dtype=attention_mask.dtype)], dim=1)
    scored = np.ones((prompt.shape[0], new), dtype=bool)
    if tokenizer is not None:
        text = torch.tensor([tokenizer(FIXED_TEXT)["input_ids"]])
    else:
        text = sequences[:1, int((attention_mask[0] == 0).sum()) :]
    with torch.no_grad():
        logits = model(input_ids=text, attention_mask=torch.ones_like(text)).logits.float().numpy()
    half = None
    if precision == "fp16":
        inputs = {"input_ids": sequences, "attention_mask": mask}
        if "position_ids" in inspect.signature(model.forward).parameters:
            inputs["position_ids"] = torch.from_numpy(_positions(mask.numpy()))
        half = agreement(half_logits(model, **inputs)[:, -new - 1 : -1], sequences[:, -new:].numpy(), scored)
    return Reference(
        sequences.numpy(), mask.numpy(), scored, text.numpy(), _text_log_likelihood(logits, text.numpy()), half
    )


def agreement(logits: np.ndarray, tokens: np.ndarray, scored: np.ndarray) -> float:
    """The share of the `scored` `tokens` (batch, steps) that are the argmax of `logits` at their step."""
    return float(((logits.argmax(-1) == tokens) & scored).sum() / scored.sum())


def half_logits(model: torch.nn.Module, **inputs: torch.Tensor) -> np.ndarray:
    """The logits of PyTorch's fp16 `model` (its floating parameters and buffers halved, as ``model.half()``
    does, without a copy of the fp32 model); floating `inputs` are halved too."""
    state = {
        name: t.half() if t.is_floating_point() else t
        for name, t in itertools.chain(model.named_parameters(), model.named_buffers())
    }
    inputs = {name: t.half() if t.is_floating_point() else t for name, t in inputs.items()}
    with torch.no_grad():
        return torch.func.functional_call(model, state, (), inputs).logits.float().numpy()


def measure(model: ir.Model | str, ref: Reference, precision: str) -> Quality:
    """`model` (in memory, or a path) against the reference: teacher-forced greedy agreement over the
    generated tokens and the perplexity on the fixed text."""
    new = ref.scored.shape[1]
    with refusals(precision):
        loaded = session(model)
        logits = _logits(loaded, ref.sequences, ref.mask)
        text_logits = _logits(loaded, ref.text, np.ones_like(ref.text))
    return Quality(
        precision,
        agreement(logits[:, -new - 1 : -1], ref.sequences[:, -new:], ref.scored),
        int(ref.scored.sum()),
        float(np.exp(-ref.text_log_likelihood)),
        float(np.exp(-_text_log_likelihood(text_logits, ref.text))),
        pytorch_agreement=ref.half_agreement,
    )


def lower_precision(
    outputs: list[ExportOutput],
    options: ExportOptions,
    measure: Callable[[tuple[ir.Model, ...]], Quality] | None = None,
    minimum: float | None = None,
) -> Quality | None:
    """Put the weights of the exported graphs `outputs` (a causal LM's one, an encoder–decoder's two) at
    `options.precision`, in place; with `minimum`, keep the most sensitive weight groups of any of them
    higher until their `measure` meets it (`quantize_to_agreement`), and return that measure."""
    fp32 = [output.model for output in outputs]
    for model in fp32:
        InlinePass()(model)  # the quantizer reads graphs, not functions
    groups = [quantize.weight_groups(model) for model in fp32]
    if minimum is None:
        for output, model, model_groups in zip(outputs, fp32, groups):
            output.model = quantize.quantize(model, options, model_groups)
        return None
    caches: list[dict] = [{} for _ in fp32]

    def lowered(keep: Collection[str] = (), only: Collection[str] | None = None) -> tuple[ir.Model, ...]:
        return tuple(quantize.quantize(m, options, g, keep, only, c) for m, g, c in zip(fp32, groups, caches))

    names = list(dict.fromkeys(name for g in groups for name in g))  # a decoder layer's cross-attention is in both
    try:
        models, quality = quantize_to_agreement(lowered, measure, names, minimum)
    except Unmeasured:
        for output, model in zip(outputs, lowered()):  # the graphs at the precision asked for, unmeasured
            output.model = model
        raise
    for output, model in zip(outputs, models):
        output.model = model
    return quality


def quantize_to_agreement(
    quantize: Callable[..., Model], measure: Callable[[Model], Quality], groups: list[str], minimum: float
) -> tuple[Model, Quality]:
    """The model `quantize(keep=[...])` (one graph, or an encoder–decoder's two) with the fewest groups
    kept at a higher precision whose `measure` meets `minimum` agreement. Groups are kept most sensitive
    first: the ones whose quantization alone (`quantize(only=[group])`, the others fp32) loses the most."""
    model = quantize(keep=[])
    quality = measure(model)
    if quality.agreement >= minimum:
        return model, quality
    alone = {g: measure(quantize(only=[g])).agreement for g in groups}
    kept: list[str] = []
    for group in sorted(groups, key=lambda g: alone[g]):
        kept.append(group)
        model = quantize(keep=kept)
        quality = dataclasses.replace(measure(model), kept=tuple(kept))
        if quality.agreement >= minimum:
            break
    return model, quality


def report(ctx: DiagnosticContext, quality: Quality, minimum: float | None) -> None:
    met = minimum is None or quality.agreement >= minimum
    wanted = "" if minimum is None else f" (min_token_agreement {minimum:.0%}{'' if met else ' not met'})"
    pytorch = quality.pytorch_agreement
    lost = pytorch is not None and quality.agreement < pytorch - LOSS_MARGIN
    if pytorch is not None:
        wanted += f"; PyTorch's own {quality.precision} model: {pytorch:.1%}"
        wanted += f", so the export loses more than {quality.precision} rounding does" if lost else ""
    ctx.report(
        rules.QUANTIZATION_QUALITY,
        Level.NOTE if met and not lost else Level.WARNING,
        f"Quality of the {quality.summary()}{wanted}.",
        precision=quality.precision,
        tokenAgreement=quality.agreement,
        tokens=quality.tokens,
        perplexityFp32=quality.perplexity_fp32,
        perplexity=quality.perplexity,
        perplexityChange=quality.perplexity_change,
        keptGroups=list(quality.kept),
        minTokenAgreement=minimum,
        pytorchTokenAgreement=pytorch,
    )


def session(model: ir.Model | str) -> Any:
    """An onnxruntime (CPU) session of `model`, in memory or a path."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    if isinstance(model, str):
        return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    proto = ir.serde.serialize_model(model)
    if proto.ByteSize() < _TWO_GIB:
        return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])
    del proto
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "model.onnx")
        ir.save(model, path, external_data="model.onnx.data")
        return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


def _logits(session: Any, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """The exported model's logits for whole sequences (a past of length 0)."""
    inputs = {i.name: i for i in session.get_inputs()}
    feeds = {"input_ids": ids.astype(np.int64), "attention_mask": mask.astype(np.int64)}
    if "position_ids" in inputs:
        feeds["position_ids"] = _positions(mask)
    for name, value in inputs.items():
        if name.startswith("past_key_values."):
            _, heads, _, size = value.shape
            feeds[name] = np.zeros(
                (ids.shape[0], heads, 0, size), dtype=np.float16 if "float16" in value.type else np.float32
            )
    return session.run(["logits"], feeds)[0].astype(np.float32)


def _positions(mask: np.ndarray) -> np.ndarray:
    """The position ids of left-padded sequences, as ``generate()`` computes them (padding at 1)."""
    return np.where(mask == 0, 1, np.cumsum(mask, axis=-1) - 1).astype(np.int64)


def mean_log_likelihood(logits: np.ndarray, tokens: np.ndarray, scored: np.ndarray | None = None) -> float:
    """The mean log probability, under `logits` (batch, steps, vocabulary), of each step's token in
    `tokens` (batch, steps) where `scored` (default: everywhere)."""
    shifted = logits.astype(np.float64) - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))
    picked = np.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0]
    return float(picked.mean() if scored is None else picked[scored].mean())


def _text_log_likelihood(logits: np.ndarray, ids: np.ndarray) -> float:
    """The mean log probability of each next token of the text `ids` under its `logits`."""
    return mean_log_likelihood(logits[:, :-1], ids[:, 1:])
