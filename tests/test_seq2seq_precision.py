"""`export_for_generation(..., precision=...)` of encoder–decoder models: int8/int4 MatMulNBits weights in
both graphs (the decoder's cross-attention branch too), fp16 weights, and the quality report (FXE0023), on a tiny BART
trained here for a few seconds to continue a repeated sentence from a window of it (so that its greedy
predictions are not random); ``min_token_agreement`` on a random tiny Whisper, whose int4 answers change;
and int4 and fp16 Whisper folders in onnxruntime-genai.

Expected agreements are computed here: the fp32 model's greedy continuation from ``generate()``, and the
exported graphs' argmax at each of its positions in onnxruntime (the decoder fed the whole continuation).
"""

from __future__ import annotations

import copy
import os
import types

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from test_generation_precision import quality_result, unrunnable
from test_seq2seq import NEW_TOKENS, features, genai_generator, genai_tokens, generate
from tiny_seq2seq import LAYERS, tiny_seq2seq
from transformers import AutoModelForSeq2SeqLM, BartConfig

import exporter
from exporter.generation.seq2seq_check import greedy_generate_seq2seq
from exporter.options import ExportOptions

TEXT = "the quick brown fox jumps over the lazy dog, and the dog sleeps. "
WINDOW = 8  # characters the encoder reads; ids are byte values
STARTS = (3, 20, 40)  # of the check's windows


def text_ids() -> torch.Tensor:
    return torch.tensor(list((TEXT * 8).encode()))


def windows(starts: tuple[int, ...], length: int, offset: int = 0) -> torch.Tensor:
    data = text_ids()
    return torch.stack([data[s + offset : s + offset + length] for s in starts])


@pytest.fixture(scope="module")
def trained() -> torch.nn.Module:
    """A 2 + 2-layer BART (hidden 64) trained to continue the text after each window (300 steps, ~4 s)."""
    torch.manual_seed(0)
    config = BartConfig(
        vocab_size=128,
        **LAYERS,
        max_position_embeddings=64,
        pad_token_id=0,
        eos_token_id=2,
        bos_token_id=1,
        decoder_start_token_id=1,
        forced_eos_token_id=None,
    )
    model = AutoModelForSeq2SeqLM.from_config(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(300):
        starts = tuple(torch.randint(0, len(text_ids()) - WINDOW - NEW_TOKENS, (16,)).tolist())
        inputs = windows(starts, WINDOW)
        loss = model(input_ids=inputs, attention_mask=torch.ones_like(inputs), labels=windows(starts, 16, WINDOW)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def exports(trained, tmp_path_factory):
    prompt = windows(STARTS, WINDOW)
    return {
        precision: exporter.export_for_generation(
            trained,
            tmp_path_factory.mktemp(precision),
            prompt=prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=NEW_TOKENS,
            export_options=ExportOptions(precision=precision),
        )
        for precision in ("fp32", "int8", "int4", "fp16")
    }


def graph_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The nodes of `graph` and of its nodes' subgraphs (the decoder's If branches)."""
    nodes = []
    for node in graph.node:
        nodes.append(node)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                nodes += graph_nodes(attribute.g)
    return nodes


def agreement(model: torch.nn.Module, folder: str, inputs: torch.Tensor, mask: torch.Tensor | None = None) -> float:
    """The share of the fp32 model's greedy tokens (up to a row's end of sequence) that the exported graphs
    predict at their position; `inputs` are token ids (with their `mask`) or Whisper's audio features."""
    generated = np.array(generate(model, inputs, mask))
    options = {"providers": ["CPUExecutionProvider"]}
    encoder = ort.InferenceSession(os.path.join(folder, "encoder_model.onnx"), **options)
    decoder = ort.InferenceSession(os.path.join(folder, "decoder_model_merged.onnx"), **options)
    if mask is None:
        (hidden, *_) = encoder.run(None, {"input_features": inputs.numpy()})
        feeds = {}
    else:
        (hidden,) = encoder.run(None, {"input_ids": inputs.numpy(), "attention_mask": mask.numpy()})
        feeds = {"encoder_attention_mask": mask.numpy()}
    start = np.ones((len(generated), 1), dtype=np.int64)  # the decoder start token
    feeds |= {
        "input_ids": np.concatenate([start, generated[:, :-1]], axis=1),
        "encoder_hidden_states": hidden,
        "use_cache_branch": np.array([False]),
    }
    for i in decoder.get_inputs():
        if i.name.startswith("past_key_values."):
            length = 0 if ".decoder." in i.name else hidden.shape[1]  # the cross cache is computed (If)
            feeds[i.name] = np.zeros((len(generated), i.shape[1], length, i.shape[3]), dtype=np.float32)
    predicted = decoder.run(["logits"], feeds)[0].argmax(-1)
    ends = generated == 2
    scored = np.cumsum(ends, axis=1) - ends == 0  # up to and including the end of sequence
    return float(((predicted == generated) & scored).sum() / scored.sum())


def test_the_trained_model_continues_its_text(trained, exports):
    """The fixture means something: the model continues each window with the text, and its fp32 export
    generates the same, checked token for token (FXE0022)."""
    prompt = windows(STARTS, WINDOW)
    with torch.no_grad():
        generated = trained.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=NEW_TOKENS)
    assert torch.equal(generated[:, 1:], windows(STARTS, NEW_TOKENS, WINDOW))
    parity = exports["fp32"].parity
    assert parity is not None and parity.divergence is None and exports["fp32"].quality is None
    assert parity.produced == generated[:, 1:].tolist()


@pytest.mark.parametrize("precision, bits", [("int8", 8), ("int4", 4)])
def test_every_weight_of_both_graphs_is_matmulnbits(exports, precision, bits):
    folder = exports[precision].output_dir
    for name in ("encoder_model.onnx", "decoder_model_merged.onnx"):
        model = onnx.load(os.path.join(folder, name))
        weights = {i.name for i in model.graph.initializer}
        nodes = graph_nodes(model.graph)
        assert not [n.name for n in nodes if n.op_type in ("MatMul", "Gemm") and n.input[1] in weights]
        quantized = [n for n in nodes if n.op_type == "MatMulNBits"]
        assert quantized and {a.i for n in quantized for a in n.attribute if a.name == "bits"} == {bits}
    branches = [n for n in onnx.load(os.path.join(folder, "decoder_model_merged.onnx")).graph.node if n.op_type == "If"]
    assert [n for n in graph_nodes(branches[0].attribute[0].g) if n.op_type == "MatMulNBits"] or [
        n for n in graph_nodes(branches[0].attribute[1].g) if n.op_type == "MatMulNBits"
    ]  # the cross-attention cache's projections, computed in a branch


def test_fp16_weights_in_both_graphs_with_fp32_inputs_and_outputs(exports):
    """Every float weight is fp16, in the If's branches too; inputs and outputs (the caches) stay fp32."""
    folder = exports["fp16"].output_dir
    for name in ("encoder_model.onnx", "decoder_model_merged.onnx"):
        model = onnx.load(os.path.join(folder, name))
        onnx.checker.check_model(model)  # topologically sorted: the converter's input Casts come after the If
        floats = {i.data_type for i in model.graph.initializer} & {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16}
        assert floats == {onnx.TensorProto.FLOAT16}
        interface = [*model.graph.input, *model.graph.output]
        assert {v.type.tensor_type.elem_type for v in interface} <= {
            onnx.TensorProto.FLOAT,
            onnx.TensorProto.INT64,
            onnx.TensorProto.BOOL,
        }


def test_lower_precision_folders_are_smaller(exports):
    def size(precision: str) -> int:
        folder = exports[precision].output_dir
        return sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))

    def weight_bytes(precision: str) -> int:
        folder = exports[precision].output_dir
        graphs = [
            onnx.load(os.path.join(folder, name)).graph for name in ("encoder_model.onnx", "decoder_model_merged.onnx")
        ]
        return sum(onnx.numpy_helper.to_array(w).nbytes for g in graphs for w in g.initializer)

    assert size("int4") < size("int8") < size("fp32")
    assert size("fp16") < size("fp32")  # the graphs' node metadata is most of such a tiny model's files
    assert weight_bytes("fp16") == pytest.approx(weight_bytes("fp32") / 2, rel=0.01)


@pytest.mark.parametrize("precision", ["int8", "int4", "fp16"])
def test_quality_report_is_in_the_sarif_log(trained, exports, precision):
    result = exports[precision]
    assert result.parity is None and result.quality is not None
    prompt = windows(STARTS, WINDOW)
    expected = agreement(trained, result.output_dir, prompt, torch.ones_like(prompt))
    sarif = quality_result(result)
    properties = sarif["properties"]
    assert properties["tokenAgreement"] == pytest.approx(expected)
    assert properties["tokens"] == len(STARTS) * NEW_TOKENS and properties["precision"] == precision
    assert properties["perplexityFp32"] < 1.5  # trained: the text is predictable
    assert sarif["level"] == "note" and f"{expected:.1%}" in sarif["message"]["text"]
    assert result.check == result.quality.summary()
    if precision == "fp16":  # compared with PyTorch's own fp16 model, teacher-forced here
        assert properties["pytorchTokenAgreement"] == pytest.approx(half_agreement(trained, prompt))


def half_agreement(model: torch.nn.Module, prompt: torch.Tensor) -> float:
    """The share of the fp32 model's greedy tokens (up to a row's end of sequence) that PyTorch's fp16 model
    predicts, fed the whole continuation."""
    generated = torch.tensor(generate(model, prompt, torch.ones_like(prompt)))
    start = torch.ones((len(generated), 1), dtype=torch.long)  # the decoder start token
    with torch.no_grad():
        logits = (
            copy.deepcopy(model)
            .half()(
                input_ids=prompt,
                attention_mask=torch.ones_like(prompt),
                decoder_input_ids=torch.cat([start, generated[:, :-1]], 1),
            )
            .logits
        )
    ends = generated == 2
    scored = torch.cumsum(ends, 1) - ends.long() == 0
    return float(((logits.argmax(-1) == generated) & scored).sum() / scored.sum())


@pytest.mark.parametrize("precision", ["int8", "fp16"])
def test_int8_and_fp16_keep_the_trained_models_answers(exports, precision):
    assert exports[precision].quality.agreement == 1.0
    assert abs(exports[precision].quality.perplexity_change) < 0.05


@pytest.mark.parametrize("precision", ["int4", "fp16"])
def test_whisper_generates_in_onnxruntime_genai_as_in_onnxruntime(tmp_path, precision):
    """genai's decoder reads the encoder's cross-attention cache; the merged decoder computes its own in
    its If branch from the same (quantized, fp16) weights: the tokens are the same."""
    model = tiny_seq2seq("whisper")
    result = exporter.export_for_generation(
        model, tmp_path, max_new_tokens=NEW_TOKENS, export_options=ExportOptions(precision=precision)
    )
    options = {"providers": ["CPUExecutionProvider"]}
    encoder = ort.InferenceSession(result.encoder_path, **options)
    decoder = ort.InferenceSession(result.model_path, **options)
    inputs = {"input_features": features(1).numpy()}
    onnxruntime = greedy_generate_seq2seq(encoder, decoder, inputs, np.ones((1, 1)), NEW_TOKENS, {2}, 0)
    _, generator = genai_generator(result.output_dir, 1)
    generator.set_model_input("input_features", inputs["input_features"])
    generator.append_tokens(np.ones((1, 1), dtype=np.int32))
    assert genai_tokens(generator, 1) == onnxruntime.tokens.tolist()


def test_min_token_agreement_keeps_sensitive_layers_of_either_graph_higher(tmp_path):
    """On random weights int4 changes a tiny Whisper's answers: weight groups of its encoder or decoder
    move to int8 until 90 % of the tokens agree."""
    model, audio = tiny_seq2seq("whisper"), torch.randn(2, 80, 3000, generator=torch.Generator().manual_seed(0))
    common = dict(prompt=audio, max_new_tokens=NEW_TOKENS, export_options=ExportOptions(precision="int4"))
    plain = exporter.export_for_generation(model, tmp_path / "plain", **common)
    assert agreement(model, plain.output_dir, audio) < 0.9  # what the option has to fix
    result = exporter.export_for_generation(model, tmp_path / "kept", min_token_agreement=0.9, **common)
    assert result.quality.kept and result.quality.agreement >= 0.9
    assert result.quality.agreement == pytest.approx(agreement(model, result.output_dir, audio))
    bits = {
        a.i
        for name in ("encoder_model.onnx", "decoder_model_merged.onnx")
        for n in graph_nodes(onnx.load(os.path.join(result.output_dir, name)).graph)
        if n.op_type == "MatMulNBits"
        for a in n.attribute
        if a.name == "bits"
    }
    assert 8 in bits  # the kept groups'; with every group kept, int8 throughout
    properties = quality_result(result)["properties"]
    assert properties["keptGroups"] == list(result.quality.kept) and properties["minTokenAgreement"] == 0.9


def test_fake_mode_and_min_token_agreement_at_fp32_are_refused(tmp_path):
    model = tiny_seq2seq("t5")
    with pytest.raises(ValueError, match="is for a lower precision"):
        exporter.export_for_generation(model, tmp_path, min_token_agreement=0.9)
    with exporter.enable_fake_mode() as ctx:
        fake = tiny_seq2seq("t5")
    with pytest.raises(ValueError, match="needs them"):
        exporter.export_for_generation(
            fake, tmp_path, export_options=ExportOptions(precision="int4", fake_context=ctx), model_state_dict={}
        )


@pytest.mark.parametrize("minimum", [None, 0.9])
def test_graphs_onnxruntime_refuses_are_an_error_and_the_folder_is_written(monkeypatch, tmp_path, minimum):
    unrunnable(monkeypatch)
    with pytest.raises(exporter.GenerationCheckError, match="FXE0023 onnxruntime cannot run the int8 model") as info:
        exporter.export_for_generation(
            tiny_seq2seq("t5"), tmp_path, min_token_agreement=minimum, export_options=ExportOptions(precision="int8")
        )
    assert info.value.written.model_path == str(tmp_path / "decoder_model_merged.onnx")
    for name in ("encoder_model.onnx", "decoder_model_merged.onnx"):
        assert "NoSuchOp" in {n.op_type for n in onnx.load(tmp_path / name, load_external_data=False).graph.node}
    result = quality_result(types.SimpleNamespace(output_dir=str(tmp_path)))
    assert result["level"] == "error" and "NoSuchOp" in result["message"]["text"]
