"""`exporter.export_for_generation` of encoder–decoder models (Whisper, T5, BART, Marian): the
encoder graph and the merged decoder graph in optimum's layout generate in onnxruntime exactly what
``generate()`` does.

Expectations come from ``model.generate(do_sample=False)`` run here (the models' own ``generate``:
Whisper's too); the ONNX side is fed by the documented input names only.
"""

from __future__ import annotations

import json
import os
import subprocess
import wave
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from helpers import console_script, validate_sarif
from tiny_seq2seq import CONFIGS, TOKENS, tiny_seq2seq, whisper_config, whisper_tokenizer
from transformers import AutoModelForSpeechSeq2Seq, MoonshineConfig, T5Config, T5ForConditionalGeneration

import exporter
from exporter.diagnostics import DiagnosticContext
from exporter.generation.seq2seq_check import check_seq2seq_generation, greedy_generate_seq2seq

NEW_TOKENS = 16
PROMPT = [[5, 17, 300, 42, 7, 99, 2], [3, 4, 5, 8, 9, 10, 2]]
PADDED, PADDED_MASK = [PROMPT[0], [0, 0, 0, *PROMPT[1][3:]]], [[1] * 7, [0, 0, 0, 1, 1, 1, 1]]
LAYERS = 2


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def exported(request, tmp_path_factory):
    model = tiny_seq2seq(request.param)
    tokenizer = whisper_tokenizer() if request.param == "whisper" else None  # onnxruntime-genai's processor needs one
    result = exporter.export_for_generation(model, tmp_path_factory.mktemp(request.param), tokenizer=tokenizer)
    return request.param, model, result


def features(batch: int) -> torch.Tensor:
    """Random audio features, seeded: Whisper's 80 mel bins over 3000 frames."""
    return torch.randn(batch, 80, 3000, generator=torch.Generator().manual_seed(7))


def generate(model: torch.nn.Module, inputs: torch.Tensor, mask: torch.Tensor | None = None) -> list[list[int]]:
    """The model's own greedy ``generate``, without its logits processors; the generated tokens."""
    kwargs = {"attention_mask": mask} if mask is not None else {}
    with torch.no_grad():
        out = model.generate(
            inputs, **kwargs, max_new_tokens=NEW_TOKENS, do_sample=False, num_beams=1, forced_eos_token_id=None
        )
    start = 1 if out[0, 0] == 1 else 0  # the decoder start token, where generate returns it
    return out[:, start:].tolist()


def onnx_generate(folder: str, inputs: torch.Tensor, mask: torch.Tensor | None = None) -> list[list[int]]:
    """Greedy generation in onnxruntime from the folder's two graphs."""
    options = {"providers": ["CPUExecutionProvider"]}
    encoder = ort.InferenceSession(os.path.join(folder, "encoder_model.onnx"), **options)
    decoder = ort.InferenceSession(os.path.join(folder, "decoder_model_merged.onnx"), **options)
    feeds = (
        {"input_features": inputs.numpy()}
        if mask is None
        else {"input_ids": inputs.numpy(), "attention_mask": mask.numpy()}
    )
    start = np.ones((inputs.shape[0], 1), dtype=np.int64)
    return greedy_generate_seq2seq(encoder, decoder, feeds, start, NEW_TOKENS, {2}, 0).tokens.tolist()


def check_inputs(name: str, batch: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    if name == "whisper":
        return features(batch), None
    if batch == 1:
        return torch.tensor(PROMPT[:1]), torch.ones(1, 7, dtype=torch.long)
    return torch.tensor(PADDED), torch.tensor(PADDED_MASK)


def test_folder_follows_optimums_layout(exported):
    name, _, result = exported
    assert {
        "encoder_model.onnx",
        "decoder_model_merged.onnx",
        "config.json",
        "generation_config.json",
        "model.sarif",
    } <= set(result.files)
    encoder = onnx.load(result.encoder_path, load_external_data=False).graph
    decoder = onnx.load(result.model_path, load_external_data=False).graph
    speech = name == "whisper"
    assert [v.name for v in encoder.input] == (["input_features"] if speech else ["input_ids", "attention_mask"])
    cross = [f"present.{i}.encoder.{kind}" for i in range(LAYERS) for kind in ("key", "value")]
    assert [v.name for v in encoder.output] == ["last_hidden_state", *(cross if speech else [])]  # for genai's Whisper
    cache = [
        f"{i}.{part}.{kind}" for i in range(LAYERS) for part in ("decoder", "encoder") for kind in ("key", "value")
    ]
    inputs = [*([] if speech else ["encoder_attention_mask"]), "input_ids", "encoder_hidden_states"]
    assert [v.name for v in decoder.input] == [*inputs, *(f"past_key_values.{c}" for c in cache), "use_cache_branch"]
    assert sorted(v.name for v in decoder.output) == sorted(["logits", *(f"present.{c}" for c in cache)])
    dims = {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*decoder.input, *decoder.output]
    }
    assert dims["input_ids"] == ["batch_size", "decoder_sequence_length"]
    assert dims["past_key_values.0.decoder.key"] == ["batch_size", 4, "past_decoder_sequence_length", 16]
    assert dims["past_key_values.0.encoder.key"] == ["batch_size", 4, "encoder_sequence_length_out", 16]
    assert dims["present.1.decoder.value"] == ["batch_size", 4, "total_decoder_sequence_length", 16]
    session = ort.InferenceSession(result.model_path, providers=["CPUExecutionProvider"])
    assert "use_cache_branch" in [i.name for i in session.get_inputs()]  # optimum's loader reads it as merged
    (branch,) = [n for n in decoder.node if n.op_type == "If"]  # the first step, or a later one
    assert list(branch.input) == ["use_cache_branch"]
    later, first = (next(a.g for a in branch.attribute if a.name == name) for name in ("then_branch", "else_branch"))
    projections = [n for n in first.node if n.op_type == "MatMul" and "encoder_hidden_states" in n.input]
    assert len(projections) == 2 * LAYERS  # the cross-attention cache: computed on the first step only
    assert not [n for n in later.node if "encoder_hidden_states" in n.input]


def test_export_checks_itself_by_generating(exported):
    _, _, result = exported
    assert result.parity.matched and result.parity.steps == NEW_TOKENS and result.parity.batch == 2
    log = validate_sarif(f"{result.output_dir}/model.sarif")
    (passed,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "FXE0022"]
    assert passed["level"] == "note" and passed["properties"]["generationCheck"] == "passed"


@pytest.mark.parametrize("batch", [1, 2])
def test_onnxruntime_generates_like_generate(exported, batch):
    name, model, result = exported
    inputs, mask = check_inputs(name, batch)
    expected = generate(model, inputs, mask)
    assert len(expected[0]) == NEW_TOKENS and len({tuple(row) for row in expected}) == batch  # rows differ
    assert onnx_generate(result.output_dir, inputs, mask) == expected


@pytest.fixture(scope="module")
def whisper(exported):
    name, model, result = exported
    if name != "whisper":
        pytest.skip("onnxruntime-genai runs Whisper (its whisper model type)")
    return model, result


def genai_generator(folder: str, batch: int) -> tuple[Any, Any]:
    import onnxruntime_genai as og  # after onnxruntime: genai loads its library

    model = og.Model(folder)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=1 + NEW_TOKENS, do_sample=False, batch_size=batch)
    return model, og.Generator(model, params)


def genai_tokens(generator: Any, batch: int) -> list[list[int]]:
    while not generator.is_done():
        generator.generate_next_token()
    return [generator.get_sequence(row).tolist()[1:] for row in range(batch)]  # after the decoder start token


@pytest.mark.parametrize("batch", [1, 2])
def test_whisper_generates_in_onnxruntime_genai(whisper, batch):
    model, result = whisper
    with open(os.path.join(result.output_dir, "genai_config.json")) as f:
        config = json.load(f)["model"]
    assert config["type"] == "whisper" and config["decoder"]["filename"] == "decoder_model_merged_genai.onnx"
    assert {"decoder_model_merged_genai.onnx", "decoder_model_merged.onnx.data"} <= set(result.files)  # weights shared
    _, generator = genai_generator(result.output_dir, batch)
    audio_features = features(batch).numpy()  # genai reads it in place: kept alive while generating
    generator.set_model_input("input_features", audio_features)
    generator.append_tokens(np.ones((batch, 1), dtype=np.int32))
    assert genai_tokens(generator, batch) == generate(model, features(batch))


def test_whisper_transcribes_audio_through_genais_processor(whisper, tmp_path):
    import onnxruntime_genai as og
    from transformers import WhisperFeatureExtractor

    model, result = whisper
    rate = 16000
    t = np.arange(3 * rate) / rate  # 3 s: a tone and noise, as 16-bit PCM
    audio = 0.3 * np.sin(2 * np.pi * 440 * t) + 0.05 * np.random.default_rng(0).standard_normal(t.size)
    pcm = (audio * 32767).astype(np.int16)
    with wave.open(str(tmp_path / "clip.wav"), "wb") as f:
        f.setnchannels(1), f.setsampwidth(2), f.setframerate(rate), f.writeframes(pcm.tobytes())
    genai_model, generator = genai_generator(result.output_dir, 1)
    processor = genai_model.create_multimodal_processor()
    inputs = processor("<|startoftranscript|>", audios=og.Audios.open(str(tmp_path / "clip.wav")))  # kept alive
    generator.set_inputs(inputs)
    extracted = WhisperFeatureExtractor(feature_size=80)(pcm / 32768, sampling_rate=rate, return_tensors="pt")
    expected = generate(model, extracted.input_features)
    assert genai_tokens(generator, 1) == expected and len(set(expected[0])) > 1


def all_nodes(graph: onnx.GraphProto) -> list[onnx.NodeProto]:
    """The graph's nodes and its subgraphs' (the decoder's ``If`` branches)."""
    nodes = list(graph.node)
    for node in graph.node:
        nodes += [n for a in node.attribute if a.type == onnx.AttributeProto.GRAPH for n in all_nodes(a.g)]
    return nodes


class T5WithDecoderNorm(T5ForConditionalGeneration):
    """A user's T5: an extra layer norm after its decoder's own final norm."""

    def __init__(self, config: T5Config) -> None:
        super().__init__(config)
        norm = torch.nn.LayerNorm(config.d_model)
        torch.nn.init.normal_(norm.weight, 1.0, 0.5)
        torch.nn.init.normal_(norm.bias, 0.0, 0.5)
        self.decoder.final_layer_norm = torch.nn.Sequential(self.decoder.final_layer_norm, norm)


def test_user_modified_model_exports_as_it_runs(tmp_path):
    torch.manual_seed(0)
    model = T5WithDecoderNorm(CONFIGS["t5"]()).eval()
    result = exporter.export_for_generation(model, tmp_path)
    assert result.parity.matched
    decoder = onnx.load(result.model_path, load_external_data=False).graph
    assert any(n.op_type == "LayerNormalization" for n in all_nodes(decoder))  # the user's norm is in the graph
    inputs, mask = check_inputs("t5", 2)
    assert onnx_generate(str(tmp_path), inputs, mask) == generate(model, inputs, mask)


def test_whisper_with_more_encoder_than_decoder_layers(tmp_path):
    model = tiny_seq2seq("whisper", whisper_config(encoder_layers=4, decoder_layers=1))  # large-v3-turbo's shape
    result = exporter.export_for_generation(model, tmp_path)
    assert result.parity.matched
    decoder = onnx.load(result.model_path, load_external_data=False).graph
    assert (
        sum(v.name.startswith("past_key_values.") for v in decoder.input) == 4
    )  # 1 layer: self and cross, key and value
    assert onnx_generate(str(tmp_path), features(2)) == generate(model, features(2))


def test_t5_with_more_decoder_than_encoder_layers(tmp_path):
    """ByT5's and T5-efficient's shape (num_decoder_layers apart from num_layers): transformers' own generate()
    sizes its cache by the encoder's layer count and raises; the check gives it caches that grow per layer."""
    config = T5Config(d_model=64, d_ff=128, d_kv=16, num_layers=2, num_decoder_layers=3, num_heads=4, **TOKENS)
    model = tiny_seq2seq("t5", config)
    with pytest.raises(IndexError):  # the transformers bug the check works around
        model.generate(torch.tensor([[5, 6, 7]]), max_new_tokens=2)
    result = exporter.export_for_generation(model, tmp_path)
    assert result.parity.matched and result.parity.steps == 16
    decoder = onnx.load(result.model_path, load_external_data=False).graph
    assert sum(v.name.startswith("past_key_values.") for v in decoder.input) == 3 * 4


def test_an_encoder_of_another_input_is_refused_with_what_to_do(tmp_path):
    """Moonshine's encoder takes raw audio (input_values): refused before any export, nothing written (the
    export crashed in the decoder's wrapper, with an AttributeError from inside transformers)."""
    config = MoonshineConfig(
        hidden_size=64,
        intermediate_size=128,
        encoder_num_hidden_layers=1,
        decoder_num_hidden_layers=1,
        encoder_num_attention_heads=4,
        decoder_num_attention_heads=4,
        **TOKENS,
    )
    model = AutoModelForSpeechSeq2Seq.from_config(config).eval()
    with pytest.raises(ValueError, match="MoonshineForConditionalGeneration's takes input_values") as raised:
        exporter.export_for_generation(model, tmp_path / "out")
    assert "exporter.dynamo_export" in str(raised.value) and not (tmp_path / "out").exists()


def test_a_wrong_decoder_weight_is_a_divergence_at_its_step(exported, tmp_path):
    name, model, result = exported
    if name != "bart":
        pytest.skip("one architecture suffices")
    decoder = onnx.load(result.model_path)
    head = max(decoder.graph.initializer, key=lambda t: np.prod(t.dims))  # the output embedding (1000 x 64)
    values = onnx.numpy_helper.to_array(head).copy()
    values[...] = values * 0.5 + np.flip(values, axis=0) * 0.5  # a different head: tokens differ from the first step
    head.CopyFrom(onnx.numpy_helper.from_array(values, head.name))
    onnx.save(decoder, tmp_path / "decoder.onnx")
    ctx = DiagnosticContext()
    parity = check_seq2seq_generation(model, result.encoder_path, str(tmp_path / "decoder.onnx"), ctx)
    (error,) = ctx.errors()
    assert error.rule.id == "FXE0022" and "Generation diverges at step" in error.message
    d = parity.divergence
    assert (error.properties["step"], error.properties["row"]) == (d.step, d.row)
    assert parity.expected[d.row][d.step] == d.expected != d.produced == parity.produced[d.row][d.step]


def test_fake_mode_whisper_writes_its_weights_and_generates(tmp_path):
    from transformers import AutoModelForSpeechSeq2Seq

    real = tiny_seq2seq("whisper")
    weights = {**real.state_dict(), **dict(real.named_buffers())}
    with exporter.enable_fake_mode() as ctx:
        fake = AutoModelForSpeechSeq2Seq.from_config(whisper_config()).eval()
    result = exporter.export_for_generation(
        fake, tmp_path, export_options=exporter.ExportOptions(fake_context=ctx), model_state_dict=weights
    )
    assert result.parity is None and {"encoder_model_initializers", "decoder_model_merged_initializers"} <= set(
        result.files
    )
    (skipped,) = [d for d in result.export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0022"]
    assert skipped.properties["generationCheck"] == "skipped"
    for path in (result.encoder_path, result.model_path):
        initializers = onnx.load(path, load_external_data=False).graph.initializer
        assert [t for t in initializers if t.data_location == onnx.TensorProto.EXTERNAL]
    assert onnx_generate(str(tmp_path), features(2)) == generate(real, features(2))


CLI_MODELS = """\
import torch
import exporter
from transformers import AutoModelForSeq2SeqLM, T5Config


@exporter.export_target(task="text-generation")
def translator():
    torch.manual_seed(0)
    config = T5Config(vocab_size=1000, d_model=32, d_ff=64, d_kv=8, num_layers=1, num_heads=4, initializer_factor=4.0,
                      pad_token_id=0, eos_token_id=2, decoder_start_token_id=1)
    return AutoModelForSeq2SeqLM.from_config(config).eval()
"""


def test_cli_exports_an_encoder_decoder_target(tmp_path):
    (tmp_path / "models.py").write_text(CLI_MODELS)
    out = tmp_path / "out"
    command = [console_script("onnxlens-export"), f"{tmp_path / 'models.py'}:translator", "-o", str(out)]
    run = subprocess.run(command, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"verified translator for generation -> {out}" in run.stdout  # checked by generating: verified
    assert "16 greedy tokens for 2 prompts identical to generate()" in run.stdout
    assert {"encoder_model.onnx", "decoder_model_merged.onnx", "model.sarif"} <= set(os.listdir(out))


def test_cli_exports_an_encoder_decoder_target_in_int8_and_reports_its_quality(tmp_path):
    (tmp_path / "models.py").write_text(CLI_MODELS)
    out = tmp_path / "out"
    command = [console_script("onnxlens-export"), f"{tmp_path / 'models.py'}:translator", "-o", str(out)]
    run = subprocess.run([*command, "--precision", "int8"], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"exported translator for generation -> {out}" in run.stdout  # measured, not checked token for token
    assert "int8: " in run.stdout and "of 32 greedy tokens agree with fp32 PyTorch" in run.stdout
    encoder = onnx.load(str(out / "encoder_model.onnx"))
    assert "MatMulNBits" in {n.op_type for n in encoder.graph.node}
