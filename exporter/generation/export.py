"""Generation-ready export of a Hugging Face causal LM: one ONNX graph with a KV cache, for prefill
(past length 0) and decode alike, in an onnxruntime-genai folder, verified by generating.

The graph has the interface optimum and onnxruntime-genai share: inputs ``input_ids``,
``attention_mask``, ``position_ids`` (where the model takes them), ``past_key_values.{i}.key`` /
``.value``; outputs ``logits``, ``present.{i}.key`` / ``.value``; dynamic ``batch_size``,
``sequence_length``, ``past_sequence_length`` and ``total_sequence_length`` (mask and presents).
The model is captured through transformers' own `DynamicCache`, with transformers' export patches
(`transformers.exporters`), by the exporter's usual pipeline (`exporter.api.Exporter`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import os
import time
from collections.abc import Iterator
from typing import Any

import onnx_ir as ir
import torch
from torch.export import Dim

from exporter.api import Exporter
from exporter.diagnostics import Level, rules
from exporter.errors import GenerationCheckError
from exporter.generation import fusions, genai_config, quality
from exporter.generation.check import check_generation, default_prompt
from exporter.generation.hf import cache_argument, copy_tokenizer, filled_cache, transformers_export_patches
from exporter.generation.written import MODEL_FILE, SARIF_FILE, GenerationExport
from exporter.options import ExportOptions
from exporter.output.program import ExportOutput

DEFAULT_CONTEXT = 4096  # the rotary caches' positions when the config has no context length
BATCH, SEQUENCE, PAST, TOTAL = "batch_size", "sequence_length", "past_sequence_length", "total_sequence_length"


class CausalLMWithCache(torch.nn.Module):
    """A causal LM called with its KV cache as tensors: (logits, [(key, value) per layer])."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model
        self.cache_argument = cache_argument(model)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor | None,
        past_key_values: list[tuple[torch.Tensor, torch.Tensor]],
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        _one_past_length(past_key_values)
        cache = filled_cache(past_key_values)
        kwargs = {"position_ids": position_ids} if position_ids is not None else {}
        with _sliding_windows_over_positions(attention_mask):
            out = self.model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                use_cache=True,
                **{self.cache_argument: cache},
                **kwargs,
            )
        return out.logits, [(layer.keys, layer.values) for layer in cache.layers]  # the model extended the cache


def _one_past_length(past_key_values: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
    """Tell the capture that every cache tensor has the same past length: torch.export gives each input
    dimension a symbol of its own, even under one `Dim`, and reasons about them apart until an op ties
    them (a quarter of the capture's symbolic arithmetic for an 8-layer model)."""
    if past_key_values:
        length = past_key_values[0][0].shape[2]
        for key, value in past_key_values:
            torch._check(key.shape[2] == length)
            torch._check(value.shape[2] == length)


@contextlib.contextmanager
def _sliding_windows_over_positions(attention_mask: torch.Tensor) -> Iterator[None]:
    """Count transformers' sliding windows (``masking_utils.sliding_window_overlay``) in token
    positions, ``cumsum(attention_mask) - 1``, rather than in cache slots.

    Without padding or with left padding (``generate``'s) both are the same. onnxruntime-genai pads
    on the right and keeps the padding's cache slots between the prompt and the generated tokens:
    counted in slots, the window would lose prompt tokens early.
    """
    from transformers import masking_utils

    positions = attention_mask.cumsum(-1) - 1

    def overlay(sliding_window: int) -> Any:
        def inner_mask(batch_idx: Any, head_idx: Any, q_idx: Any, kv_idx: Any) -> Any:
            return positions[batch_idx, kv_idx] > positions[batch_idx, q_idx] - sliding_window

        return inner_mask

    original = masking_utils.sliding_window_overlay
    masking_utils.sliding_window_overlay = overlay
    try:
        yield
    finally:
        masking_utils.sliding_window_overlay = original


def export_for_generation(
    model: torch.nn.Module,
    output_dir: str | os.PathLike,
    *,
    verify_generation: bool = True,
    max_new_tokens: int = 16,
    prompt: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    tokenizer: Any = None,
    export_options: ExportOptions | None = None,
    model_state_dict: dict[str, Any] | str | os.PathLike | None = None,
    sarif: bool = True,
    min_token_agreement: float | None = None,
) -> GenerationExport:
    """Export a Hugging Face causal LM (``AutoModelForCausalLM``) for generation into `output_dir`:
    ``model.onnx`` (weights as external data ``model.onnx.data``), ``genai_config.json``,
    ``config.json``, ``generation_config.json``, the tokenizer's files (from `tokenizer`, or copied
    from the model's folder on disk) and the SARIF log ``model.sarif`` (`sarif`).

    With `verify_generation` (default), the exported model greedily generates `max_new_tokens` from
    `prompt` (default: a left-padded batch of 2 random prompts; `attention_mask` marks padding) in
    onnxruntime with its KV cache, token for token against ``model.generate(do_sample=False)``
    (rule FXE0022). A divergence raises `GenerationCheckError` (an `OnnxExporterError`) after the folder
    is written; its ``written`` is this function's result, its ``export_output`` holds the diagnostics.

    `export_options` as for `dynamo_export`, except that the graph's dynamic shapes are its own and
    its checks are the generation check (`dynamic_shapes`, `op_level_debug`, `verify` must be unset;
    `second_size_check` is moot).

    ``export_options.precision`` (``fp32``, ``fp16``, ``int8``, ``int4``; with ``block_size``,
    ``symmetric``, ``accuracy_level``, ``int8_head``) sets the weights' precision (`quantize`). A
    non-fp32 model is not checked token for token but measured (FXE0023, `quality`): greedy-token
    agreement with the fp32 PyTorch model on the check's prompts and the perplexity change on a fixed
    text; with `min_token_agreement` (0 … 1) the most sensitive layers stay at a higher precision until
    the agreement meets it.

    Fake mode: build the model inside ``with exporter.enable_fake_mode() as ctx:`` and pass
    ``ExportOptions(fake_context=ctx)``; the weights come from `model_state_dict` (a dict, or a ``.safetensors`` /
    ``torch.save`` checkpoint; by default the checkpoints loaded under fake mode) and are written as
    external data in ``model_initializers/``. Without real weights there is nothing to generate with:
    the generation check is skipped (a note says so).
    """
    export_options = export_options or ExportOptions()
    _refuse_what_it_cannot_take(export_options, model_state_dict, min_token_agreement)
    if getattr(model.config, "is_encoder_decoder", False):  # Whisper, T5, BART, Marian, …: two graphs (seq2seq.py)
        from exporter.generation.seq2seq import export_seq2seq_for_generation

        return export_seq2seq_for_generation(
            model,
            output_dir,
            verify_generation=verify_generation,
            max_new_tokens=max_new_tokens,
            prompt=prompt,
            attention_mask=attention_mask,
            tokenizer=tokenizer,
            export_options=export_options,
            model_state_dict=model_state_dict,
            sarif=sarif,
            min_token_agreement=min_token_agreement,
        )
    precision, fake_context = export_options.precision, export_options.fake_context
    output_dir = os.fspath(output_dir)
    start = time.perf_counter()
    # the fusions inline every function: with them, the modules are not wrapped in functions first
    modularize = export_options.modularize and not export_options.fused_kernels
    export_output = export_graph(model, dataclasses.replace(export_options, modularize=modularize))
    if export_options.fused_kernels:
        positions = genai_config.context_length_of(model.config) or DEFAULT_CONTEXT
        fusion = fusions.fuse(export_output.model, positions)
        fusions.report(export_output.diagnostic_context, fusion, export_output.model)
    quality_report, reference, verify_seconds = None, None, 0.0
    if precision != "fp32":
        if verify_generation or min_token_agreement is not None:
            prompt, attention_mask = _prompt(model, prompt, attention_mask)
            verify_start = time.perf_counter()
            reference = quality.reference(model, prompt, attention_mask, max_new_tokens, tokenizer, precision)
            verify_seconds = time.perf_counter() - verify_start
        quality_report = quality.measured(
            export_output.diagnostic_context,
            lambda: quality.lower_precision(
                [export_output],
                export_options,
                lambda models: quality.measure(models[0], reference, precision),
                min_token_agreement,
            ),
        )
    export_seconds = time.perf_counter() - start - verify_seconds
    uses_positions = "position_ids" in [v.name for v in export_output.model.graph.inputs]

    os.makedirs(output_dir, exist_ok=True)
    files = _write_folder(export_output, model, output_dir, tokenizer, uses_positions, model_state_dict)
    if (reason := genai_config.incompatibility(export_output.model.graph)) is not None:
        export_output.diagnostic_context.report(
            rules.GENAI_INCOMPATIBLE,
            Level.WARNING,
            f"onnxruntime-genai cannot run this folder: {reason}. Its model.onnx runs in onnxruntime, as the "
            "generation check runs it.",
        )
    parity = None
    if precision != "fp32":  # not token for token: measured (FXE0023)
        start = time.perf_counter()
        if quality_report is None and min_token_agreement is None and verify_generation:  # the folder's model
            path = os.path.join(output_dir, MODEL_FILE)
            quality_report = quality.measured(
                export_output.diagnostic_context, lambda: quality.measure(path, reference, precision)
            )
        if quality_report is not None:
            quality.report(export_output.diagnostic_context, quality_report, min_token_agreement)
        verify_seconds += time.perf_counter() - start
    elif verify_generation and fake_context is not None:
        export_output.diagnostic_context.report(
            rules.GENERATION_DIVERGENCE,
            Level.NOTE,
            "Generation check skipped: the model was exported under fake mode (no weights to generate with).",
            generationCheck="skipped",
        )
    elif verify_generation:
        start = time.perf_counter()
        parity = check_generation(
            model,
            os.path.join(output_dir, MODEL_FILE),
            export_output.diagnostic_context,
            prompt,
            attention_mask,
            max_new_tokens,
        )
        verify_seconds = time.perf_counter() - start
    if sarif:
        export_output.save_diagnostics(os.path.join(output_dir, SARIF_FILE))
        files.append(SARIF_FILE)
    result = GenerationExport(output_dir, files, export_output, parity, export_seconds, verify_seconds, quality_report)
    errors = export_output.diagnostic_context.errors()
    if errors:
        raise GenerationCheckError(result, f"{errors[0].rule.id} {errors[0].message}")
    return result


def _refuse_what_it_cannot_take(
    options: ExportOptions, model_state_dict: Any, min_token_agreement: float | None
) -> None:
    """Raise `ValueError` for the arguments `export_for_generation` cannot take, causal or encoder–decoder."""
    fixed = [name for name in ("dynamic_shapes", "op_level_debug", "verify") if getattr(options, name)]
    if fixed:
        raise ValueError(
            f"export_for_generation does not take {', '.join(fixed)} (its shapes and checks are fixed: it is checked by generating)"
        )
    fake_context, precision = options.fake_context, options.precision
    if fake_context is not None and model_state_dict is None and not fake_context.state_dict_paths:
        raise ValueError(
            "Under fake mode the weights must come from somewhere: pass model_state_dict (a state dict or checkpoint path)."
        )
    if precision != "fp32" and fake_context is not None:
        raise ValueError(f"precision={precision!r} lowers the weights' precision: it needs them (no fake mode).")
    if min_token_agreement is not None and not (precision != "fp32" and 0 <= min_token_agreement <= 1):
        raise ValueError("min_token_agreement (0 … 1) is for a lower precision (int4, int8, fp16)")


def _prompt(
    model: torch.nn.Module, prompt: torch.Tensor | None, mask: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompt of the checks: `prompt`, else the generation check's default; its mask."""
    if prompt is None:
        return default_prompt(model.config.get_text_config(decoder=True).vocab_size, 0)
    return prompt, mask if mask is not None else torch.ones_like(prompt)


def export_graph(model: torch.nn.Module, options: ExportOptions | None = None) -> ExportOutput:
    """The generation graph of `model` with its standard names, in memory (`export_for_generation`
    without the folder and the check); `options` with its own dynamic shapes."""
    options = options or ExportOptions()
    wrapper = CausalLMWithCache(model).eval()
    uses_positions = "position_ids" in inspect.signature(model.forward).parameters
    fake_context = options.fake_context
    with fake_context.fake_mode if fake_context is not None else contextlib.nullcontext():
        args, shapes = _example(model, uses_positions)
    # no second-size check: the generation check runs prefill and decode at many sizes
    export_options = dataclasses.replace(options, dynamic_shapes=shapes, second_size_check=False)
    with torch.no_grad(), transformers_export_patches():
        export_output = Exporter(export_options, wrapper, args, {}).export()
    _name_interface(export_output.model, len(args[-1]), uses_positions)
    return export_output


def _example(model: torch.nn.Module, uses_positions: bool) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Example inputs (batch 2, 3 new tokens, 1 past) and their dynamic shapes.

    The past of size 1 makes the capture size-oblivious, so neither 1 nor 0 is baked in anywhere: the
    graph serves a prefill (past 0) as well as a decode step (1 new token).
    """
    batch, new, past = 2, 3, 1
    input_ids = torch.zeros(batch, new, dtype=torch.long)
    mask = torch.ones(batch, past + new, dtype=torch.long)
    positions = torch.arange(past, past + new).expand(batch, new).contiguous() if uses_positions else None
    cache = [
        tuple(torch.zeros(batch, heads, past, size, dtype=dtype) for heads, size, dtype in layer)
        for layer in _cache_layout(model)
    ]
    context = genai_config.context_length_of(model.config)  # code for positions past it may be another (XGLM's)
    b, s = Dim(BATCH, min=1), Dim(SEQUENCE, min=1, max=context)
    p, t = Dim(PAST, min=0, max=context - 1 if context else None), Dim(TOTAL, min=1, max=context)
    kv = {0: b, 2: p}
    shapes = {
        "input_ids": {0: b, 1: s},
        "attention_mask": {0: b, 1: t},
        "position_ids": {0: b, 1: s} if uses_positions else None,
        "past_key_values": [(kv, kv) for _ in cache],
    }
    return (input_ids, mask, positions, cache), shapes


def _cache_layout(model: torch.nn.Module) -> list[tuple[tuple[int, int, torch.dtype], ...]]:
    """(heads, head size, dtype) of each layer's key and value, as the model caches one token: read,
    not derived from the config, whose names for them vary (Falcon's multi-query ``num_kv_heads``)."""
    from transformers import DynamicCache
    from transformers.cache_utils import LinearAttentionCacheLayerMixin

    layers = DynamicCache(config=model.config).layers
    if recurrent := sorted(
        {type(layer).__name__ for layer in layers if isinstance(layer, LinearAttentionCacheLayerMixin)}
    ):
        raise ValueError(
            f"export_for_generation exports decoders whose layers all cache keys and values; {type(model).__name__} "
            f"caches recurrent states ({', '.join(recurrent)}: the convolution and SSM states of a state-space or "
            "linear-attention layer), which its graph cannot take as past_key_values. Export a forward pass without "
            "the cache instead: exporter.dynamo_export(model, input_ids)."
        )
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=torch.ones(1, 1, dtype=torch.long), use_cache=True, **{cache_argument(model): cache})
    return [tuple((t.shape[1], t.shape[-1], t.dtype) for t in (layer.keys, layer.values)) for layer in cache.layers]


def _name_interface(model: ir.Model, layers: int, uses_positions: bool) -> None:
    """Give the graph's inputs and outputs the standard names, and the presents' length its name."""
    cache_names = [f"{{}}.{i}.{kind}" for i in range(layers) for kind in ("key", "value")]
    inputs = [
        "input_ids",
        "attention_mask",
        *(["position_ids"] if uses_positions else []),
        *(n.format("past_key_values") for n in cache_names),
    ]
    outputs = ["logits", *(n.format("present") for n in cache_names)]
    graph = model.graph
    if len(graph.outputs) != len(outputs) or len(graph.inputs) < len(inputs):
        raise RuntimeError(
            f"The exported graph has {len(graph.inputs)} inputs and {len(graph.outputs)} outputs; expected {len(inputs)} and {len(outputs)}."
        )
    for value, name in zip(graph.inputs, inputs):
        value.name = name
        if name.startswith("past_key_values."):  # the exporter names only top-level inputs' Dims
            _name_dim(value, 2, PAST)
    for value, name in zip(graph.outputs, outputs):
        value.name = name
        if name.startswith("present."):
            _name_dim(value, 2, TOTAL)


def _name_dim(value: ir.Value, axis: int, name: str) -> None:
    if value.shape is not None and not isinstance(value.shape[axis], int):
        dims = list(value.shape)
        dims[axis] = ir.SymbolicDim(name)
        value.shape = ir.Shape(dims)


def _write_folder(
    export_output: ExportOutput,
    model: torch.nn.Module,
    output_dir: str,
    tokenizer: Any,
    uses_positions: bool,
    state_dict: Any,
) -> list[str]:
    """Write the model, its configs and tokenizer; the names written, relative to `output_dir`."""
    export_output.save(os.path.join(output_dir, MODEL_FILE), model_state_dict=state_dict, external_data=True)
    weights = [
        f"{MODEL_FILE}.data",
        f"{os.path.splitext(MODEL_FILE)[0]}_initializers",
    ]  # as `ExportOutput.save` names them
    files = [MODEL_FILE, *(w for w in weights if os.path.exists(os.path.join(output_dir, w)))]
    model.config.save_pretrained(output_dir)
    model.generation_config.save_pretrained(output_dir)
    config = genai_config.build(
        model.config, model.generation_config, export_output.model.graph, MODEL_FILE, uses_positions
    )
    with open(os.path.join(output_dir, genai_config.FILE), "w", encoding="utf-8") as f:
        json.dump(config, f, indent=4)
    return [
        *files,
        "config.json",
        "generation_config.json",
        genai_config.FILE,
        *copy_tokenizer(model, tokenizer, output_dir),
    ]
