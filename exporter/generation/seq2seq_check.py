"""The generation check (FXE0022) of an encoder–decoder export: greedy generation in onnxruntime
(the encoder once, then the merged decoder with its caches), token for token against transformers'
``generate(do_sample=False)`` from the same encoder input and decoder prompt.

Both sides generate without the model's logits processors (Whisper's suppressed tokens, Marian's
forced end of sequence, …): these are not part of the graphs, a runtime applies them or not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from exporter.diagnostics import DiagnosticContext, Level, rules
from exporter.generation.check import (
    TIE_TOLERANCE,
    GreedyResult,
    GreedySteps,
    Parity,
    default_prompt,
    eager_generation_failed,
    empty_pasts,
    report,
)
from exporter.generation.quality import session

__all__ = ["Parity", "check_seq2seq_generation", "greedy_generate_seq2seq"]


def greedy_generate_seq2seq(
    encoder: Any,
    decoder: Any,
    encoder_inputs: dict[str, np.ndarray],
    decoder_input_ids: np.ndarray,
    max_new_tokens: int,
    eos_token_ids: set[int],
    pad_token_id: int,
) -> GreedyResult:
    """Greedy generation with onnxruntime sessions of an exported encoder and merged decoder."""
    (hidden,) = encoder.run(["last_hidden_state"], encoder_inputs)
    inputs = {i.name: i for i in decoder.get_inputs()}
    batch = decoder_input_ids.shape[0]
    feeds: dict[str, np.ndarray] = {"encoder_hidden_states": hidden, "use_cache_branch": np.array([False])}
    if "encoder_attention_mask" in inputs:
        feeds["encoder_attention_mask"] = encoder_inputs["attention_mask"].astype(np.int64)
    past_names = [n for n in inputs if n.startswith("past_key_values.")]
    feeds |= empty_pasts(inputs, past_names, batch)  # the first step's (optimum's ORTModel feeds the same)
    ids = decoder_input_ids.astype(np.int64)
    steps = GreedySteps(decoder, batch, eos_token_ids, pad_token_id)
    for _ in range(max_new_tokens):
        feeds["input_ids"] = ids
        outputs, token = steps.step(feeds)
        if steps.done:
            break
        first_step = not feeds["use_cache_branch"][0]
        for name in past_names:  # the cross-attention cache of the first step is kept (as optimum's ORTModel does)
            if first_step or ".encoder." not in name:
                feeds[name] = outputs[name.replace("past_key_values.", "present.")]
        feeds["use_cache_branch"] = np.array([True])
        ids = token[:, None].astype(np.int64)
    return steps.result()


def token_ids(model: torch.nn.Module) -> tuple[set[int], int, int]:
    """The end-of-sequence ids, the pad id and the decoder start id generation uses."""
    generation_config, config = model.generation_config, model.config

    def first_set(name: str) -> Any:
        value = getattr(generation_config, name, None)
        return value if value is not None else getattr(config, name, None)

    eos = first_set("eos_token_id")
    eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
    pad = first_set("pad_token_id")
    start = first_set("decoder_start_token_id")
    return eos_ids, pad if pad is not None else min(eos_ids, default=0), start if start is not None else pad or 0


def default_inputs(model: torch.nn.Module, pad: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The check's encoder input: a left-padded batch of two random prompts, or two random clips of
    Whisper's audio features (fixed by seed)."""
    config = model.config
    if getattr(model, "main_input_name", "input_ids") == "input_features":
        generator = torch.Generator().manual_seed(0)
        features = torch.randn(2, config.num_mel_bins, 2 * config.max_source_positions, generator=generator)
        return features.to(next(model.parameters()).dtype), None
    return default_prompt(config.get_text_config(decoder=True).vocab_size, pad)


def check_inputs(
    model: torch.nn.Module,
    inputs: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    decoder_input_ids: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor]:
    """The encoder input, its mask (None for audio features) and the decoder prompt of the checks: the
    given ones, else `default_inputs` and the decoder start token."""
    _, pad, start = token_ids(model)
    if inputs is None:
        inputs, attention_mask = default_inputs(model, pad)
    if attention_mask is None and not inputs.is_floating_point():
        attention_mask = torch.ones_like(inputs)
    if decoder_input_ids is None:
        decoder_input_ids = torch.full((inputs.shape[0], 1), start, dtype=torch.long)
    return inputs, attention_mask, decoder_input_ids


def encoder_feeds(inputs: torch.Tensor, attention_mask: torch.Tensor | None) -> dict[str, np.ndarray]:
    """The encoder graph's inputs: audio features, or token ids and their mask."""
    if inputs.is_floating_point():
        return {"input_features": inputs.numpy()}
    return {"input_ids": inputs.numpy(), "attention_mask": attention_mask.numpy()}


def eager_generate(
    model: torch.nn.Module,
    inputs: torch.Tensor,
    attention_mask: torch.Tensor | None,
    decoder_input_ids: torch.Tensor,
    max_new_tokens: int,
) -> tuple[np.ndarray, list[np.ndarray]]:
    """transformers' greedy ``generate`` (GenerationMixin's, without the model's logits processors):
    the generated tokens and each step's logits."""
    from transformers import DynamicCache, EncoderDecoderCache, GenerationConfig, GenerationMixin

    eos_ids, pad, start = token_ids(model)
    plain = GenerationConfig(
        do_sample=False,
        num_beams=1,
        eos_token_id=sorted(eos_ids) or None,
        pad_token_id=pad,
        decoder_start_token_id=start,
        max_new_tokens=max_new_tokens,
        min_new_tokens=0,
    )
    original = model.generation_config
    model.generation_config = plain  # generate() fills unset options from it: none of the model's processors
    try:
        kwargs = {"attention_mask": attention_mask.clone()} if attention_mask is not None else {}
        # caches that grow a layer per layer called: generate() sizes its own by the config's layer count, the
        # encoder's where the decoder's differs (a T5 with num_decoder_layers; its generate() raises)
        cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        with torch.no_grad():
            out = GenerationMixin.generate(
                model,
                inputs.clone(),
                past_key_values=cache,
                decoder_input_ids=decoder_input_ids.clone(),
                output_logits=True,
                return_dict_in_generate=True,
                **kwargs,
            )
    finally:
        model.generation_config = original
    return out.sequences[:, decoder_input_ids.shape[1] :].numpy(), [x.float().numpy() for x in out.logits]


def check_seq2seq_generation(
    model: torch.nn.Module,
    encoder_path: str,
    decoder_path: str,
    ctx: DiagnosticContext,
    inputs: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    decoder_input_ids: torch.Tensor | None = None,
    max_new_tokens: int = 16,
) -> Parity | None:
    """Generate greedily with the exported encoder and decoder and eagerly; report under FXE0022 (None: the
    eager model's generation raised, `eager_generation_failed`)."""
    eos_ids, pad, _ = token_ids(model)
    inputs, attention_mask, decoder_input_ids = check_inputs(model, inputs, attention_mask, decoder_input_ids)
    try:
        expected, eager_logits = eager_generate(model, inputs, attention_mask, decoder_input_ids, max_new_tokens)
    except Exception as e:
        return eager_generation_failed(ctx, e)
    try:
        result = greedy_generate_seq2seq(
            session(encoder_path),
            session(decoder_path),
            encoder_feeds(inputs, attention_mask),
            decoder_input_ids.numpy(),
            max_new_tokens,
            eos_ids,
            pad,
        )
    except Exception as e:
        reason = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        message = f"The exported model does not generate in onnxruntime: {reason}"
        ctx.report(rules.GENERATION_DIVERGENCE, Level.ERROR, message, generationCheck="failed")
        return Parity(inputs.shape[0], 0, expected.tolist(), [], None, 0.0, 0.0, error=message)
    return report(ctx, expected, eager_logits, result, TIE_TOLERANCE.get(next(model.parameters()).dtype, 1e-3))
