"""The quality report (FXE0023) of a non-fp32 encoder–decoder export: the fp32 PyTorch model's greedy
continuations of the check's inputs, teacher-forced through the exported encoder and merged decoder
(one decoder step over each whole continuation, its caches empty). It reports the share of those
tokens the export predicts, and the continuations' perplexity under each model; for an fp16 export,
PyTorch's own fp16 model's share too (`quality.report` compares them).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx_ir as ir
import torch

from exporter.generation.check import empty_pasts
from exporter.generation.quality import Quality, agreement, half_logits, mean_log_likelihood, refusals, session
from exporter.generation.seq2seq_check import check_inputs, eager_generate, encoder_feeds, token_ids


@dataclasses.dataclass(frozen=True)
class Reference:
    """The fp32 PyTorch model's greedy continuations, computed once."""

    encoder_inputs: dict[str, np.ndarray]
    sequences: np.ndarray  # (batch, prompt + new) the decoder prompts and their continuations
    scored: np.ndarray  # (batch, new) True up to and including a row's end of sequence
    log_likelihood: float  # the fp32 model's mean log probability of the scored tokens
    half_agreement: float | None  # PyTorch's own fp16 model's share of the tokens (an fp16 export's reference)


def reference(
    model: torch.nn.Module,
    inputs: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    decoder_input_ids: torch.Tensor | None,
    max_new_tokens: int,
    precision: str,
) -> Reference:
    """Greedy-generate with the fp32 model from the check's inputs (`check_inputs`); for an fp16 export,
    teacher-force PyTorch's own fp16 model with them too."""
    eos_ids, _, _ = token_ids(model)
    inputs, attention_mask, decoder_input_ids = check_inputs(model, inputs, attention_mask, decoder_input_ids)
    generated, logits = eager_generate(model, inputs, attention_mask, decoder_input_ids, max_new_tokens)
    ended = np.isin(generated, list(eos_ids))
    scored = np.cumsum(ended, axis=1) - ended == 0  # no end of sequence before
    sequences = np.concatenate([decoder_input_ids.numpy(), generated], axis=1)
    feeds = encoder_feeds(inputs, attention_mask)
    half = None
    if precision == "fp16":
        encoder_inputs = {name: torch.from_numpy(value) for name, value in feeds.items()}
        logits_half = half_logits(model, **encoder_inputs, decoder_input_ids=torch.from_numpy(sequences[:, :-1]))
        half = agreement(logits_half[:, -generated.shape[1] :], generated, scored)
    return Reference(feeds, sequences, scored, mean_log_likelihood(np.stack(logits, axis=1), generated, scored), half)


def measure(encoder: ir.Model | str, decoder: ir.Model | str, ref: Reference, precision: str) -> Quality:
    """The exported graphs (in memory, or paths) against the reference: the share of its tokens they
    predict, teacher-forced, and the perplexity of its continuations (FXE0023's figures)."""
    new = ref.scored.shape[1]
    with refusals(precision):
        logits = _logits(session(encoder), session(decoder), ref.encoder_inputs, ref.sequences[:, :-1])[:, -new:]
    return Quality(
        precision,
        agreement(logits, ref.sequences[:, -new:], ref.scored),
        int(ref.scored.sum()),
        float(np.exp(-ref.log_likelihood)),
        float(np.exp(-mean_log_likelihood(logits, ref.sequences[:, -new:], ref.scored))),
        pytorch_agreement=ref.half_agreement,
    )


def _logits(encoder: Any, decoder: Any, encoder_inputs: dict[str, np.ndarray], ids: np.ndarray) -> np.ndarray:
    """The decoder's logits for whole decoder sequences `ids`, as its first step computes them."""
    (hidden,) = encoder.run(["last_hidden_state"], encoder_inputs)
    inputs = {i.name: i for i in decoder.get_inputs()}
    feeds = {"input_ids": ids.astype(np.int64), "encoder_hidden_states": hidden, "use_cache_branch": np.array([False])}
    if "encoder_attention_mask" in inputs:
        feeds["encoder_attention_mask"] = encoder_inputs["attention_mask"].astype(np.int64)
    feeds |= empty_pasts(inputs, [n for n in inputs if n.startswith("past_key_values.")], ids.shape[0])
    return decoder.run(["logits"], feeds)[0].astype(np.float32)
