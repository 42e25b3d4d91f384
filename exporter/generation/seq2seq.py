"""Generation-ready export of a Hugging Face encoder–decoder model (Whisper, T5, BART, Marian, …):
an encoder graph and one decoder graph with its caches, in optimum's layout, verified by generating.

- ``encoder_model.onnx``: ``input_ids``, ``attention_mask`` (Whisper: ``input_features``) →
  ``last_hidden_state``.
- ``decoder_model_merged.onnx``: ``encoder_attention_mask`` (not Whisper), ``input_ids``,
  ``encoder_hidden_states``, ``past_key_values.{i}.decoder.key`` / ``.value`` (self-attention),
  ``past_key_values.{i}.encoder.key`` / ``.value`` (cross-attention), ``use_cache_branch`` →
  ``logits``, ``present.{i}.decoder.*``, ``present.{i}.encoder.*``. The first step feeds pasts of
  length 0 and ``use_cache_branch`` false: the cross-attention cache is then computed from
  ``encoder_hidden_states`` (an ``If``); later steps feed the first step's back with
  ``use_cache_branch`` true.
- Whisper, for onnxruntime-genai's ``whisper`` type (`seq2seq_config`): the encoder outputs the
  cross-attention cache too, ``present.{i}.encoder.*``, and ``decoder_model_merged_genai.onnx`` is
  the decoder with defaults for the inputs genai does not feed (`write_genai_decoder`).

A non-fp32 `precision` lowers the weights of both graphs (int8/int4 ``MatMulNBits``, or fp16:
`quality.lower_precision`; with `min_token_agreement`, the most sensitive layers of either stay higher);
such a folder is measured (`seq2seq_quality`), not checked token for token.

Both graphs are captured from the model's own code (its ``forward`` with ``encoder_outputs`` and
transformers' ``EncoderDecoderCache``), so a user's modified model exports as it runs. The
cross-attention cache branch is the decoder run once with an empty cross cache, of which only the
key/value projections stay (the rest is dead code).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir
import torch
from onnx_ir.passes.common import InlinePass, RemoveUnusedNodesPass
from torch.export import Dim

from exporter.api import Exporter
from exporter.diagnostics import Level, rules
from exporter.errors import GenerationCheckError
from exporter.generation import quality, seq2seq_config, seq2seq_quality
from exporter.generation.hf import cache_argument, copy_tokenizer, filled_cache, transformers_export_patches
from exporter.generation.seq2seq_check import check_seq2seq_generation
from exporter.generation.written import SARIF_FILE, GenerationExport
from exporter.options import ExportOptions
from exporter.output.external_data import WEIGHT_META, WEIGHT_NAMES_META
from exporter.output.program import ExportOutput

ENCODER_FILE = "encoder_model.onnx"
DECODER_FILE = "decoder_model_merged.onnx"
GENAI_DECODER_FILE = "decoder_model_merged_genai.onnx"  # Whisper: the same graph and weights, for onnxruntime-genai
ENCODER_SARIF_FILE = "encoder_model.sarif"
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json", "normalizer.json")
BATCH, ENCODER_SEQUENCE = "batch_size", "encoder_sequence_length"
DECODER_SEQUENCE, PAST = "decoder_sequence_length", "past_decoder_sequence_length"
TOTAL, ENCODER_PAST = "total_decoder_sequence_length", "encoder_sequence_length_out"


@dataclasses.dataclass(kw_only=True)
class Seq2SeqExport(GenerationExport):
    """What `export_for_generation` wrote for an encoder–decoder model, and what its check found: its
    `export_output` is the decoder's (whose diagnostics hold the generation check)."""

    encoder_output: ExportOutput

    @property
    def model_path(self) -> str:
        return os.path.join(self.output_dir, DECODER_FILE)

    @property
    def encoder_path(self) -> str:
        return os.path.join(self.output_dir, ENCODER_FILE)


def is_encoder_decoder(model: torch.nn.Module) -> bool:
    return bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))


def is_speech(model: torch.nn.Module) -> bool:
    """Whether the encoder takes audio features (Whisper's ``input_features``), not token ids."""
    return getattr(model, "main_input_name", "input_ids") == "input_features"


class Encoder(torch.nn.Module):
    """The model's encoder: token ids and mask (or audio features) → ``last_hidden_state``."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.encoder = model.get_encoder()

    def forward(self, inputs: torch.Tensor, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        if attention_mask is None:
            return self.encoder(inputs).last_hidden_state
        return self.encoder(input_ids=inputs, attention_mask=attention_mask).last_hidden_state


class DecoderWithCache(torch.nn.Module):
    """The model's forward from the encoder's output, with its self- and cross-attention caches as
    tensors: (logits, [(self key, self value) per layer])."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()

        self.model = model
        self.cache_argument = cache_argument(model)

    def forward(
        self,
        encoder_attention_mask: torch.Tensor | None,
        input_ids: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        past_key_values: list[tuple[torch.Tensor, ...]],
    ) -> tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]]]:
        cache = self.run(encoder_attention_mask, input_ids, encoder_hidden_states, past_key_values)
        return cache.logits, [(layer.keys, layer.values) for layer in cache.self_attention_cache.layers]

    def run(
        self, encoder_attention_mask: Any, input_ids: Any, encoder_hidden_states: Any, past_key_values: list
    ) -> Any:
        """The caches after one forward (and its logits, as ``.logits``)."""
        from transformers import EncoderDecoderCache
        from transformers.modeling_outputs import BaseModelOutput

        self_cache = filled_cache([layer[:2] for layer in past_key_values])
        cross_cache = filled_cache([layer[2:] for layer in past_key_values])
        cache = EncoderDecoderCache(self_cache, cross_cache)
        mask = {"attention_mask": encoder_attention_mask} if encoder_attention_mask is not None else {}
        out = self.model(
            encoder_outputs=BaseModelOutput(last_hidden_state=encoder_hidden_states),
            decoder_input_ids=input_ids,
            use_cache=True,
            **mask,
            **{self.cache_argument: cache},
        )
        cache.logits = out.logits
        return cache


class CrossCache(DecoderWithCache):
    """The cross-attention cache the model's forward fills from ``encoder_hidden_states`` (one token
    through an empty cache, of which only the keys' and values' projections stay in the graph)."""

    def forward(self, encoder_hidden_states: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:  # type: ignore
        ids = torch.full((encoder_hidden_states.shape[0], 1), _decoder_start(self.model), dtype=torch.long)
        cache = self.run(None, ids, encoder_hidden_states, [])
        return [(layer.keys, layer.values) for layer in cache.cross_attention_cache.layers]


def export_graphs(model: torch.nn.Module, options: ExportOptions | None = None) -> tuple[ExportOutput, ExportOutput]:
    """The encoder graph and the merged decoder graph of `model`, with optimum's names, in memory."""

    options = dataclasses.replace(options or ExportOptions(), second_size_check=False)
    fake_context = options.fake_context
    with fake_context.fake_mode if fake_context is not None else contextlib.nullcontext():
        layout = cache_layout(model)
        encoder_args, encoder_shapes = _encoder_example(model)
        decoder_args, decoder_shapes = _decoder_example(model, layout)
        cross_args, cross_shapes = decoder_args[2:3], {"encoder_hidden_states": decoder_shapes["encoder_hidden_states"]}
    with torch.no_grad(), transformers_export_patches():
        encoder = _export(Encoder(model), encoder_args, encoder_shapes, options)
        decoder = _export(DecoderWithCache(model), decoder_args, decoder_shapes, options)
        cross = _export(CrossCache(model), cross_args, cross_shapes, options)
    _name_encoder(encoder.model, is_speech(model))
    _name_decoder(decoder.model, len(layout), is_speech(model))
    _name_cross(cross.model, len(layout))
    if is_speech(model):  # onnxruntime-genai's Whisper: the encoder computes the cross-attention cache
        add_cross_cache(encoder.model, _copy(cross.model))
    merge_cross_cache(decoder.model, cross.model)
    return encoder, decoder


def _export(
    module: torch.nn.Module, args: tuple[Any, ...], shapes: dict[str, Any], options: ExportOptions
) -> ExportOutput:
    export_output = Exporter(dataclasses.replace(options, dynamic_shapes=shapes), module.eval(), args, {}).export()
    InlinePass()(export_output.model)  # one graph: the merge moves nodes between graphs
    return export_output


def cache_layout(model: torch.nn.Module) -> list[tuple[int, int]]:
    """(heads, head size) of each decoder layer's self-attention cache, as the model fills it for one
    token (under fake mode, fake tensors of the same shapes): read, not derived from config names that
    vary (T5's ``d_kv``)."""
    batch, encoder_length = 1, 2
    hidden = torch.zeros(batch, encoder_length, _hidden_size(model), dtype=_dtype(model))
    mask = None if is_speech(model) else torch.ones(batch, encoder_length, dtype=torch.long)
    ids = torch.full((batch, 1), _decoder_start(model), dtype=torch.long)
    with torch.no_grad():
        kv = DecoderWithCache(model)(mask, ids, hidden, [])[1]
    return [(k.shape[1], k.shape[-1]) for k, _ in kv]


def _hidden_size(model: torch.nn.Module) -> int:
    config = model.config
    return getattr(config, "d_model", None) or config.hidden_size


def _dtype(model: torch.nn.Module) -> torch.dtype:
    return next(model.parameters()).dtype


def _decoder_start(model: torch.nn.Module) -> int:
    start = model.generation_config.decoder_start_token_id
    start = start if start is not None else model.config.decoder_start_token_id
    return int(start if start is not None else model.config.pad_token_id or 0)


def _copy(model: ir.Model) -> ir.Model:
    """A copy of `model`, with the exporter's marks of its weights (fake mode: graph inputs)."""
    copy = ir.serde.deserialize_model(ir.serde.serialize_model(model))
    copy.meta[WEIGHT_NAMES_META] = model.meta.get(WEIGHT_NAMES_META, ())
    weights = {v.name for v in model.graph.inputs if v.meta.get(WEIGHT_META)}
    for value in copy.graph.inputs:
        if value.name in weights:
            value.meta[WEIGHT_META] = True
    return copy


def context_length(config: Any) -> int | None:
    """The most decoder positions the model takes (Whisper's ``max_target_positions``), if bounded."""
    names = ("max_target_positions", "max_position_embeddings", "n_positions")
    return next((value for name in names if (value := getattr(config, name, None))), None)


def _encoder_example(model: torch.nn.Module) -> tuple[tuple[Any, ...], dict[str, Any]]:
    batch = Dim(BATCH, min=1)
    if is_speech(model):  # Whisper takes its fixed number of frames (30 s of audio)
        config = model.config
        features = torch.zeros(2, config.num_mel_bins, 2 * config.max_source_positions, dtype=_dtype(model))
        return (features, None), {"inputs": {0: batch}, "attention_mask": None}
    length = Dim(ENCODER_SEQUENCE, min=1, max=getattr(model.config, "max_position_embeddings", None))
    ids, mask = torch.ones(2, 5, dtype=torch.long), torch.ones(2, 5, dtype=torch.long)
    return (ids, mask), {"inputs": {0: batch, 1: length}, "attention_mask": {0: batch, 1: length}}


def _decoder_example(model: torch.nn.Module, layout: list[tuple[int, int]]) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """Example inputs (batch 2, 3 new tokens, a past of 1, 5 encoder positions) and their dynamic shapes."""
    batch, new, past, encoder_length = 2, 3, 1, 5
    dtype, context = _dtype(model), context_length(model.config)
    b, e = Dim(BATCH, min=1), Dim(ENCODER_SEQUENCE, min=1)
    s, p = Dim(DECODER_SEQUENCE, min=1, max=context), Dim(PAST, min=0, max=context - 1 if context else None)
    mask = None if is_speech(model) else torch.ones(batch, encoder_length, dtype=torch.long)
    ids = torch.full((batch, new), _decoder_start(model), dtype=torch.long)
    hidden = torch.zeros(batch, encoder_length, _hidden_size(model), dtype=dtype)
    cache = [
        (
            *(torch.zeros(batch, heads, past, size, dtype=dtype) for _ in "kv"),
            *(torch.zeros(batch, heads, encoder_length, size, dtype=dtype) for _ in "kv"),
        )
        for heads, size in layout
    ]
    shapes = {
        "encoder_attention_mask": None if mask is None else {0: b, 1: e},
        "input_ids": {0: b, 1: s},
        "encoder_hidden_states": {0: b, 1: e},
        "past_key_values": [({0: b, 2: p}, {0: b, 2: p}, {0: b, 2: e}, {0: b, 2: e}) for _ in cache],
    }
    return (mask, ids, hidden, cache), shapes


def _cache_names(layers: int, prefix: str, parts: tuple[str, ...]) -> list[str]:
    return [f"{prefix}.{i}.{part}.{kind}" for i in range(layers) for part in parts for kind in ("key", "value")]


def _rename(values: Any, names: list[str], what: str) -> None:
    """Name the first values (under fake mode the weights follow the inputs)."""
    values = [v for v in values if not v.meta.get(WEIGHT_META)]
    if len(values) != len(names):
        raise RuntimeError(
            f"The exported {what} has {len(values)} values; expected {len(names)} ({', '.join(names[:4])}, …)."
        )
    for value, name in zip(values, names):
        value.name = name


def _name_encoder(model: ir.Model, speech: bool) -> None:
    _rename(model.graph.inputs, ["input_features"] if speech else ["input_ids", "attention_mask"], "encoder's inputs")
    _rename(model.graph.outputs, ["last_hidden_state"], "encoder's outputs")


def _name_decoder(model: ir.Model, layers: int, speech: bool) -> None:
    inputs = [*([] if speech else ["encoder_attention_mask"]), "input_ids", "encoder_hidden_states"]
    _rename(
        model.graph.inputs,
        [*inputs, *_cache_names(layers, "past_key_values", ("decoder", "encoder"))],
        "decoder's inputs",
    )
    _rename(model.graph.outputs, ["logits", *_cache_names(layers, "present", ("decoder",))], "decoder's outputs")
    for value in model.graph.inputs:
        if value.name.startswith("past_key_values."):  # the exporter names only top-level inputs' Dims
            _name_dim(value, 2, PAST if ".decoder." in value.name else ENCODER_PAST)
    for value in model.graph.outputs:
        if value.name.startswith("present."):
            _name_dim(value, 2, TOTAL)


def _name_cross(model: ir.Model, layers: int) -> None:
    _rename(model.graph.inputs, ["encoder_hidden_states"], "cross cache's inputs")
    _rename(model.graph.outputs, _cache_names(layers, "present", ("encoder",)), "cross cache's outputs")


def _name_dim(value: ir.Value, axis: int, name: str) -> None:
    if value.shape is not None and not isinstance(value.shape[axis], int):
        dims = list(value.shape)
        dims[axis] = ir.SymbolicDim(name)
        value.shape = ir.Shape(dims)


def merge_cross_cache(decoder: ir.Model, cross: ir.Model) -> None:
    """Make `decoder` (cross-attention cache as inputs) serve the first step too, as optimum's merged
    decoder: an ``If`` on a new input ``use_cache_branch`` runs the decoder on the fed-back cache (true;
    its ``present.{i}.encoder.*`` are empty: the first step's cache stays) or on `cross`'s, computed
    from ``encoder_hidden_states`` (false; outputs it). Each branch reads its cache where it is: no
    copy of the cross-attention cache per step. In place; the weights are shared by name."""
    graph = decoder.graph
    first_step = _copy(decoder)
    pasts = [v for v in graph.inputs if v.name.startswith("past_key_values.") and ".encoder." in v.name]
    outer = {v.name: v for v in graph.inputs}
    cross_nodes, computed = _take(decoder, cross, outer, "cross_cache")
    bindings = outer | {past.name: value for past, value in zip(pasts, computed)}
    first_nodes, first_outputs = _take(decoder, first_step, bindings, "first_step")
    for prefix, values in (("cross_cache", computed), ("first_step", first_outputs)):
        for value in values:  # a branch's values must not take the names of the If's outputs
            value.name = f"{prefix}/{value.name}"
    nodes, outputs = list(graph), list(graph.outputs)
    graph.remove(nodes)
    graph.outputs.clear()
    names, types, shapes = [v.name for v in outputs], [v.type for v in outputs], [v.shape for v in outputs]
    for value in outputs:
        value.name = f"with_cache/{value.name}"
    empties = [  # (0, heads, 0, head size): the declared shape, with no element
        ir.Node("", "Constant", [], [ir.AttrTensor("value", _empty(p))], outputs=[_named(f"with_cache/{p.name}")])
        for p in pasts
    ]
    with_cache = ir.Graph([], [*outputs, *(n.outputs[0] for n in empties)], nodes=[*nodes, *empties], name="with_cache")
    first = ir.Graph([], [*first_outputs, *computed], nodes=[*cross_nodes, *first_nodes], name="first_step")
    use_cache = ir.Value(name="use_cache_branch", shape=ir.Shape([1]), type=ir.TensorType(ir.DataType.BOOL))
    node = ir.Node("", "If", [use_cache], num_outputs=len(outputs) + len(pasts), name="use_cache_branch_If")
    node.attributes["then_branch"] = ir.AttrGraph("then_branch", with_cache)
    node.attributes["else_branch"] = ir.AttrGraph("else_branch", first)
    for value, name, type_, shape in zip(node.outputs, names, types, shapes):
        value.name, value.type, value.shape = name, type_, shape
    for value, past in zip(node.outputs[len(outputs) :], pasts):
        value.name = past.name.replace("past_key_values.", "present.")
        value.type, value.shape = past.type, _with_dim(past.shape, 2, ENCODER_SEQUENCE)
    graph.append(node)
    graph.inputs.append(use_cache)
    graph.outputs.extend(node.outputs)
    RemoveUnusedNodesPass()(decoder)


def _named(name: str) -> ir.Value:
    return ir.Value(name=name)


def _empty(past: ir.Value) -> ir.Tensor:
    dims = [dim if isinstance(dim, int) else 0 for dim in past.shape]
    return ir.tensor(np.zeros(dims, dtype=past.dtype.numpy()))


def add_cross_cache(encoder: ir.Model, cross: ir.Model) -> None:
    """Give `encoder` the cross-attention cache as outputs ``present.{i}.encoder.*`` too (computed
    from its ``last_hidden_state`` by `cross`): onnxruntime-genai's Whisper reads it there. In place."""
    (hidden,) = encoder.graph.outputs
    nodes, outputs = _take(encoder, cross, {"encoder_hidden_states": hidden}, "cross_cache")
    encoder.graph.extend(nodes)
    encoder.graph.outputs.extend(outputs)
    RemoveUnusedNodesPass()(encoder)


def _take(
    host: ir.Model, part: ir.Model, inputs: dict[str, ir.Value], prefix: str
) -> tuple[list[ir.Node], list[ir.Value]]:
    """Move `part`'s nodes out of it, reading `inputs` (by `part`'s input names) and `host`'s weights
    (shared by parameter name; the others join `host`, renamed where a name is taken): its nodes and
    outputs, for `host` to place."""
    graph, branch = host.graph, part.graph
    for value in list(branch.inputs):
        if value.name in inputs:
            value.replace_all_uses_with(inputs[value.name])
        elif value.meta.get(WEIGHT_META) and value.uses():  # fake mode: a weight the host does not read
            branch.inputs.remove(value)
            graph.inputs.append(value)
        elif value.uses():
            raise RuntimeError(
                f"The cross-attention cache reads {value.name}, which {graph.name or 'the graph'} does not take."
            )
    parameters = set(host.meta.get(WEIGHT_NAMES_META, ())) | set(part.meta.get(WEIGHT_NAMES_META, ()))
    taken = {v.name for v in graph.inputs} | set(graph.initializers) | {v.name for n in graph for v in n.outputs}
    for name, weight in list(branch.initializers.items()):
        branch.initializers.pop(name)
        if name in graph.initializers and name in parameters:  # the same parameter (not a constant's name)
            weight.replace_all_uses_with(graph.initializers[name])
            continue
        if name in taken:
            weight.name = f"{prefix}/{name}"
        graph.register_initializer(weight)
    nodes, outputs = list(branch), list(branch.outputs)
    for node in nodes:  # the part's names must not shadow the host's
        node.name = f"{prefix}/{node.name}"
        for value in node.outputs:
            if not value.is_graph_output():
                value.name = f"{prefix}/{value.name}"
    branch.remove(nodes)
    branch.outputs.clear()
    for domain, version in branch.opset_imports.items():
        graph.opset_imports.setdefault(domain, version)
    return nodes, outputs


def write_genai_decoder(output_dir: str) -> str:
    """Write ``decoder_model_merged.onnx`` again as onnxruntime-genai's Whisper decoder,
    ``GENAI_DECODER_FILE``, its weights read from the same external data: with defaults for the inputs
    genai does not feed (it feeds the cross-attention cache the encoder computed), ``use_cache_branch``
    true and ``encoder_hidden_states`` (unread then). Not in the optimum graph: onnxruntime hides
    inputs with defaults, and optimum's loader then reads the graph as not merged. Its name."""
    proto = onnx.load(os.path.join(output_dir, DECODER_FILE), load_external_data=False)
    hidden = next(v for v in proto.graph.input if v.name == "encoder_hidden_states").type.tensor_type
    size = hidden.shape.dim[-1].dim_value
    dtype = onnx.helper.tensor_dtype_to_np_dtype(hidden.elem_type)
    proto.graph.initializer.extend(
        [
            onnx.numpy_helper.from_array(np.array([True]), "use_cache_branch"),
            onnx.numpy_helper.from_array(np.zeros((1, 1, size), dtype=dtype), "encoder_hidden_states"),
        ]
    )
    onnx.save(proto, os.path.join(output_dir, GENAI_DECODER_FILE))
    return GENAI_DECODER_FILE


def _with_dim(shape: ir.Shape | None, axis: int, name: str) -> ir.Shape | None:
    if shape is None:
        return None
    dims = list(shape)
    dims[axis] = ir.SymbolicDim(name)
    return ir.Shape(dims)


def export_seq2seq_for_generation(
    model: torch.nn.Module,
    output_dir: str | os.PathLike,
    *,
    verify_generation: bool = True,
    max_new_tokens: int = 16,
    prompt: torch.Tensor | None = None,
    attention_mask: torch.Tensor | None = None,
    decoder_input_ids: torch.Tensor | None = None,
    tokenizer: Any = None,
    export_options: ExportOptions,
    model_state_dict: dict[str, Any] | str | os.PathLike | None = None,
    sarif: bool = True,
    min_token_agreement: float | None = None,
) -> Seq2SeqExport:
    """`exporter.export_for_generation` for an encoder–decoder model, its arguments checked there (its
    docstring; the module's for the graphs): `prompt` is the encoder's input (token ids, or Whisper's
    ``input_features``), `decoder_input_ids` the decoder's prompt (default: the decoder start token)."""
    encoder_input = getattr(model, "main_input_name", "input_ids")
    if encoder_input not in ("input_ids", "input_features"):
        raise ValueError(
            f"export_for_generation exports encoder-decoders whose encoder takes token ids (T5, BART, Marian, …) or "
            f"Whisper's audio features; {type(model).__name__}'s takes {encoder_input}, which it does "
            "not export yet. Export its encoder and its decoder with exporter.dynamo_export instead."
        )
    precision, fake_context = export_options.precision, export_options.fake_context
    output_dir = os.fspath(output_dir)
    start = time.perf_counter()
    encoder, decoder = export_graphs(model, dataclasses.replace(export_options, fused_kernels=False))
    ref, measured, verify_seconds = None, None, 0.0
    if precision != "fp32":
        if verify_generation or min_token_agreement is not None:
            verify_start = time.perf_counter()
            ref = seq2seq_quality.reference(model, prompt, attention_mask, decoder_input_ids, max_new_tokens, precision)
            verify_seconds = time.perf_counter() - verify_start
        measured = quality.measured(
            decoder.diagnostic_context,
            lambda: quality.lower_precision(
                [encoder, decoder],
                export_options,
                lambda models: seq2seq_quality.measure(*models, ref, precision),
                min_token_agreement,
            ),
        )
    export_seconds = time.perf_counter() - start - verify_seconds
    os.makedirs(output_dir, exist_ok=True)
    encoder.save(os.path.join(output_dir, ENCODER_FILE), model_state_dict=model_state_dict, strict=False)
    decoder_path = os.path.join(output_dir, DECODER_FILE)
    if is_speech(model) and model_state_dict is None:  # external data, which genai's copy of the graph shares
        ir.save(decoder.model, decoder_path, external_data=f"{DECODER_FILE}.data")
    else:
        decoder.save(decoder_path, model_state_dict=model_state_dict, strict=False)
    files = [ENCODER_FILE, DECODER_FILE, *([write_genai_decoder(output_dir)] if is_speech(model) else [])]
    files += [*_weight_files(output_dir), *_write_configs(model, output_dir, tokenizer)]
    ctx = decoder.diagnostic_context
    parity = None
    paths = os.path.join(output_dir, ENCODER_FILE), os.path.join(output_dir, DECODER_FILE)
    if verify_generation and fake_context is not None:
        message = "Generation check skipped: the model was exported under fake mode (no weights to generate with)."
        ctx.report(rules.GENERATION_DIVERGENCE, Level.NOTE, message, generationCheck="skipped")
    elif precision != "fp32":  # not token for token: measured (FXE0023)
        start = time.perf_counter()
        if measured is None and min_token_agreement is None and verify_generation:  # the folder's graphs
            measured = quality.measured(ctx, lambda: seq2seq_quality.measure(*paths, ref, precision))
        if measured is not None:
            quality.report(ctx, measured, min_token_agreement)
        verify_seconds += time.perf_counter() - start
    elif verify_generation:
        start = time.perf_counter()
        parity = check_seq2seq_generation(model, *paths, ctx, prompt, attention_mask, decoder_input_ids, max_new_tokens)
        verify_seconds = time.perf_counter() - start
    if sarif:
        decoder.save_diagnostics(os.path.join(output_dir, SARIF_FILE))
        encoder.save_diagnostics(os.path.join(output_dir, ENCODER_SARIF_FILE))
        files += [SARIF_FILE, ENCODER_SARIF_FILE]
    result = Seq2SeqExport(
        output_dir, files, decoder, parity, export_seconds, verify_seconds, measured, encoder_output=encoder
    )
    errors = [*encoder.diagnostic_context.errors(), *ctx.errors()]
    if errors:
        raise GenerationCheckError(result, f"{errors[0].rule.id} {errors[0].message}")
    return result


def _weight_files(output_dir: str) -> list[str]:
    """The external data `ExportOutput.save` wrote beside the two graphs."""
    names = [f"{f}.data" for f in (ENCODER_FILE, DECODER_FILE)] + [
        f"{os.path.splitext(f)[0]}_initializers" for f in (ENCODER_FILE, DECODER_FILE)
    ]
    return [name for name in names if os.path.exists(os.path.join(output_dir, name))]


def _write_configs(model: torch.nn.Module, output_dir: str, tokenizer: Any) -> list[str]:
    """config.json, generation_config.json, onnxruntime-genai's configs (Whisper), the tokenizer and processor files."""

    model.config.save_pretrained(output_dir)
    model.generation_config.save_pretrained(output_dir)
    files = ["config.json", "generation_config.json"]
    files += seq2seq_config.write(model, output_dir, ENCODER_FILE, GENAI_DECODER_FILE)
    files += copy_tokenizer(model, tokenizer, output_dir)
    files += seq2seq_config.copy_processor(model, output_dir, PROCESSOR_FILES)
    return files
