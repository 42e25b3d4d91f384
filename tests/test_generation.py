"""`exporter.export_for_generation`: tiny causal LMs exported with their KV cache generate, in
onnxruntime (the project's loop) and in onnxruntime-genai, exactly what ``generate()`` does.

Expectations come from ``model.generate(do_sample=False)`` run here; the ONNX side is fed by the
documented input names only.
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import onnxscript
import pytest
import torch
from helpers import console_script, validate_sarif
from onnxscript import opset18 as op
from tiny_lms import CONFIGS, MORE_CONFIGS, genai_generate, tiny_model
from transformers import AutoModelForCausalLM, BertConfig, BertModel, GenerationConfig, MambaConfig, MambaForCausalLM

import exporter
from exporter.generation.check import greedy_generate

NEW_TOKENS = 16
PROMPT = [[5, 17, 300, 42, 7, 99, 12], [3, 4, 5, 8, 9, 10, 11]]
PADDED, PADDED_MASK = [PROMPT[0], [0, 0, 0, *PROMPT[1][3:]]], [[1] * 7, [0, 0, 0, 1, 1, 1, 1]]  # left-padded, pad 0


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def exported(request, tmp_path_factory):
    model = tiny_model(request.param)
    result = exporter.export_for_generation(model, tmp_path_factory.mktemp(request.param))
    return request.param, model, result


def generate(model: torch.nn.Module, ids: list[list[int]], mask: list[list[int]] | None = None) -> list[list[int]]:
    ids = torch.tensor(ids)
    mask = torch.tensor(mask) if mask is not None else torch.ones_like(ids)
    with torch.no_grad():
        out = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, pad_token_id=0)
    return out[:, ids.shape[1] :].tolist()


def test_folder_interface_and_config(exported):
    name, model, result = exported
    assert {"model.onnx", "genai_config.json", "config.json", "generation_config.json", "model.sarif"} <= set(
        result.files
    )
    graph = onnx.load(result.model_path, load_external_data=False).graph
    dims = {
        v.name: [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in [*graph.input, *graph.output]
    }
    kv_heads = 1 if name == "gemma" else 4 if name == "gpt2" else 2
    cache = [f"{i}.{kind}" for i in range(2) for kind in ("key", "value")]
    positions = ["position_ids"]  # every listed architecture takes them (GPT-2's absolute positions too)
    assert [v.name for v in graph.input] == [
        "input_ids",
        "attention_mask",
        *positions,
        *(f"past_key_values.{c}" for c in cache),
    ]
    assert [v.name for v in graph.output] == ["logits", *(f"present.{c}" for c in cache)]
    assert dims["input_ids"] == dims["position_ids"] == ["batch_size", "sequence_length"]
    assert dims["attention_mask"] == ["batch_size", "total_sequence_length"]
    assert dims["logits"] == ["batch_size", "sequence_length", 1000]
    for c in cache:
        assert dims[f"past_key_values.{c}"] == ["batch_size", kv_heads, "past_sequence_length", 16]
        assert dims[f"present.{c}"] == ["batch_size", kv_heads, "total_sequence_length", 16]
    with open(f"{result.output_dir}/genai_config.json") as f:
        config = json.load(f)
    decoder = config["model"]["decoder"]
    assert (decoder["head_size"], decoder["num_key_value_heads"], decoder["num_hidden_layers"]) == (16, kv_heads, 2)
    assert (
        decoder["inputs"]["past_key_names"] == "past_key_values.%d.key"
        and decoder["outputs"]["present_value_names"] == "present.%d.value"
    )
    assert (config["model"]["eos_token_id"], config["model"]["pad_token_id"]) == (2, 0)
    assert config["search"]["past_present_share_buffer"] is True  # fused: the cache is one buffer per layer


def test_export_checks_itself_by_generating(exported):
    _, model, result = exported
    assert result.parity.matched and result.parity.steps == NEW_TOKENS and result.parity.batch == 2
    log = validate_sarif(f"{result.output_dir}/model.sarif")
    (passed,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "FXE0022"]
    assert passed["level"] == "note" and passed["properties"]["generationCheck"] == "passed"


@pytest.mark.parametrize("batch", ["one", "left-padded two"])
def test_own_loop_generates_like_generate(exported, batch):
    _, model, result = exported
    if batch == "one":
        ids, mask = PROMPT[:1], [[1] * 7]
    else:
        ids, mask = PADDED, PADDED_MASK
    session = ort.InferenceSession(result.model_path, providers=["CPUExecutionProvider"])
    produced = greedy_generate(session, np.array(ids), np.array(mask), NEW_TOKENS, {2}, 0)
    assert produced.tokens.tolist() == generate(model, ids, mask)
    assert len(produced.decode_ms) == NEW_TOKENS - 1  # one file: the prefill (past 0) and every decode step


@pytest.mark.parametrize("batch", ["one", "two", "padded two"])
def test_onnxruntime_genai_generates_like_generate(exported, batch):
    _, model, result = exported
    ids, mask = {"one": (PROMPT[:1], [[1] * 7]), "two": (PROMPT, [[1] * 7] * 2), "padded two": (PADDED, PADDED_MASK)}[
        batch
    ]
    assert genai_generate(result.output_dir, right_padded(ids, mask, pad=0)) == generate(model, ids, mask)


@pytest.mark.parametrize("name", sorted(MORE_CONFIGS))
def test_more_architectures_generate_like_generate(name, tmp_path):
    """One architecture per class of problem found beyond the five (see `tiny_lms.MORE_CONFIGS`): the
    export checks itself by generating (a left-padded batch), and onnxruntime-genai generates what
    ``generate()`` does (a batch without padding: MPT's ALiBi counts cache slots, padding ones too)."""
    model = tiny_model(name)
    result = exporter.export_for_generation(model, tmp_path)
    assert result.parity.matched and result.parity.steps == NEW_TOKENS and result.parity.batch == 2
    assert genai_generate(tmp_path, PROMPT) == generate(model, PROMPT)


def test_genai_config_without_pad_or_bos_ids_pads_with_eos(exported, tmp_path):
    from exporter.generation import genai_config

    _, model, result = exported
    config = copy.deepcopy(model.config)
    config.pad_token_id = config.bos_token_id = None
    generation_config = GenerationConfig(eos_token_id=2)
    written = genai_config.build(
        config, generation_config, result.export_output.model.graph, "model.onnx", uses_positions=True
    )["model"]
    assert (
        written["pad_token_id"] == written["eos_token_id"] == 2 and "bos_token_id" not in written
    )  # genai refuses null ids
    for name in ("model.onnx", "model.onnx.data"):  # the weights are external data
        shutil.copy(os.path.join(result.output_dir, name), tmp_path)
    (tmp_path / genai_config.FILE).write_text(
        json.dumps({**json.load(open(f"{result.output_dir}/{genai_config.FILE}")), "model": written})
    )
    assert genai_generate(tmp_path, right_padded(PADDED, PADDED_MASK, pad=2)) == generate(model, PADDED, PADDED_MASK)


def right_padded(ids: list[list[int]], mask: list[list[int]], pad: int) -> list[list[int]]:
    """The rows' tokens padded on the right: onnxruntime-genai's layout (its tokenizer's encode_batch
    pads right; it masks `pad` at the end of a row and takes the logits of the row's last other token)."""
    return [[t for t, m in zip(row, row_mask) if m] + [pad] * row_mask.count(0) for row, row_mask in zip(ids, mask)]


wrong = onnxscript.values.Opset("onnxlens.test.wrong", 1)


@onnxscript.script(wrong)
def cos_wrong_from_10(x):
    """Cos, off by 0.5 from an angle of 9.5 on: rotary positions from 10 on are wrong."""
    c = op.Cos(x)
    return op.Where(
        op.Greater(x, op.CastLike(op.Constant(value_float=9.5), x)),
        op.Add(c, op.CastLike(op.Constant(value_float=0.5), x)),
        c,
    )


def test_wrong_rotary_translation_is_a_divergence_at_its_step(tmp_path):
    model = tiny_model("llama")
    registry = exporter.OnnxRegistry()
    registry.register_op(cos_wrong_from_10, "aten", "cos")
    with pytest.raises(exporter.GenerationCheckError, match="FXE0022 Generation diverges at step") as info:
        exporter.export_for_generation(model, tmp_path, export_options=exporter.ExportOptions(onnx_registry=registry))
    written = info.value.written  # what was written, for the user to look at
    assert written.model_path == str(tmp_path / "model.onnx") and sorted(written.files) == sorted(os.listdir(tmp_path))
    (error,) = info.value.export_output.diagnostic_context.errors()
    step, row = error.properties["step"], error.properties["row"]
    # The default prompt's first row has 7 tokens (positions 0-6): step k runs position 6 + k, and
    # rotary's first frequency is 1, so the wrong cos is first used at step 10 - 6 = 4.
    assert 4 <= step < NEW_TOKENS and row in (0, 1)
    ids, mask = _default_prompt()
    expected = generate(model, ids.tolist(), mask.tolist())
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    produced = greedy_generate(session, ids.numpy(), mask.numpy(), NEW_TOKENS, {2}, 0).tokens.tolist()
    first = min(k for k in range(NEW_TOKENS) if any(e[k] != p[k] for e, p in zip(expected, produced)))
    assert step == first
    assert (error.properties["expectedToken"], error.properties["producedToken"]) == (
        expected[row][step],
        produced[row][step],
    )
    assert (
        error.properties["logitMargin"] > 0 and error.properties["eagerLogitMargin"] > 1e-3
    )  # a real divergence, not a tie
    log = validate_sarif(tmp_path / "model.sarif")
    (result,) = [r for r in log["runs"][0]["results"] if r["ruleId"] == "FXE0022"]
    assert result["level"] == "error" and result["properties"]["step"] == step


def test_verify_generation_false_skips_the_check(tmp_path):
    result = exporter.export_for_generation(tiny_model("gpt2"), tmp_path, verify_generation=False, sarif=False)
    assert result.parity is None and "model.sarif" not in result.files
    assert not [d for d in result.export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0022"]


def _default_prompt() -> tuple[torch.Tensor, torch.Tensor]:
    """The check's default prompt, rebuilt here: two seeded random rows, the second left-padded by 3."""
    ids = torch.randint(0, 1000, (2, 7), generator=torch.Generator().manual_seed(0))
    ids[ids == 0] = 1
    mask = torch.ones_like(ids)
    mask[1, :3] = 0
    ids[1, :3] = 0
    return ids, mask


CLI_MODELS = """\
import torch
import exporter
from transformers import AutoModelForCausalLM, GPT2Config


def tiny_gpt2():
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=1000, n_embd=64, n_layer=2, n_head=4, n_positions=256, tie_word_embeddings=False,
                        initializer_range=0.1, bos_token_id=1, eos_token_id=2, pad_token_id=0)
    return AutoModelForCausalLM.from_config(config).eval()


@exporter.export_target(task="text-generation")
def lm():
    return tiny_gpt2()


@exporter.export_target
def lm_with_prompt():
    return tiny_gpt2(), (torch.tensor([[5, 17, 300, 42]]),)
"""


@pytest.mark.parametrize("target, flags", [("lm", []), ("lm_with_prompt", ["--task", "text-generation"])])
def test_cli_exports_a_generation_folder(tmp_path, target, flags):
    (tmp_path / "models.py").write_text(CLI_MODELS)
    out = tmp_path / "out" / target
    run = subprocess.run(
        [console_script("onnxlens-export"), f"{tmp_path / 'models.py'}:{target}", *flags, "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    prompts = 2 if target == "lm" else 1  # the default left-padded pair, or the target's prompt
    assert (
        f"16 greedy tokens for {prompts} prompt" in run.stdout and f"verified {target} for generation -> {out}"
    )  # checked by generating in run.stdout
    assert {"model.onnx", "genai_config.json", "generation_config.json", "model.sarif"} <= set(os.listdir(out))


def test_cli_refuses_options_a_generation_export_does_not_take(tmp_path):
    (tmp_path / "models.py").write_text(CLI_MODELS)
    run = subprocess.run(
        [
            console_script("onnxlens-export"),
            f"{tmp_path / 'models.py'}:lm",
            "--dynamic-shapes",
            "-o",
            str(tmp_path / "o"),
        ],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 1 and "does not take dynamic_shapes" in run.stderr and not (tmp_path / "o").exists()


@pytest.fixture(scope="module")
def saved_folder(tmp_path_factory):
    """A tiny GPT-2 saved with ``save_pretrained``, as a user's fine-tuned model folder is."""
    folder = tmp_path_factory.mktemp("saved") / "tiny-gpt2"
    tiny_model("gpt2").save_pretrained(folder)
    return folder


def test_cli_exports_a_saved_model_folder_beside_it_and_checks_it(saved_folder):
    run = subprocess.run(
        [sys.executable, "-m", "exporter", str(saved_folder)], capture_output=True, text=True, timeout=600
    )
    out = f"{saved_folder}-onnx"
    assert run.returncode == 0, run.stderr
    assert f"verified tiny-gpt2 for generation -> {out}" in run.stdout and "16 greedy tokens" in run.stdout
    assert run.stderr == ""  # no dependency's notes about itself, no weight-loading progress bar
    assert {"model.onnx", "genai_config.json", "config.json", "model.sarif"} <= set(os.listdir(out))


@pytest.mark.parametrize("from_file", [False, True], ids=["folder", "task_flag"])
def test_cli_without_the_generation_check_says_exported_not_verified(saved_folder, tmp_path, from_file):
    (tmp_path / "models.py").write_text(CLI_MODELS)
    target, name = (
        ([f"{tmp_path / 'models.py'}:lm_with_prompt", "--task", "text-generation"], "lm_with_prompt")
        if from_file
        else ([str(saved_folder)], "tiny-gpt2")
    )
    out = tmp_path / "unchecked"
    run = subprocess.run(
        [console_script("onnxlens-export"), *target, "-o", str(out), "--no-generation-check"],
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert f"exported {name} for generation -> {out}" in run.stdout and "generation not verified" in run.stdout
    assert "generation check" not in run.stdout
    log = json.loads((out / "model.sarif").read_text())
    assert not [r for r in log["runs"][0]["results"] if r["ruleId"] == "FXE0022"]


def _saved_bert(folder):
    """A BERT encoder saved with ``save_pretrained``: a model folder, but not one to generate with."""
    config = BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=100
    )
    BertModel(config).save_pretrained(folder / "bert")
    return folder / "bert"


def _saved_with_a_weight_missing(folder):
    """A tiny Llama folder whose checkpoint lost one tensor: from_pretrained would initialize it at random."""
    from safetensors.torch import load_file, save_file

    tiny_model("llama").save_pretrained(folder / "holey")
    weights = load_file(folder / "holey" / "model.safetensors")
    del weights["model.layers.0.mlp.up_proj.weight"]
    save_file(weights, folder / "holey" / "model.safetensors", metadata={"format": "pt"})
    return folder / "holey"


@pytest.mark.parametrize(
    "make_target, flags, message",
    [
        (lambda tmp: tmp, [], "is a folder without config.json"),
        (_saved_bert, [], "bert/config.json: error: target bert: "),  # located at the folder's config
        (
            _saved_with_a_weight_missing,
            [],
            "has no weights for 1 of the model's tensors (model.layers.0.mlp.up_proj.weight); loaded, they would be random",
        ),
        (
            lambda tmp: tmp / "models.py:small",
            ["--no-generation-check"],
            "--no-generation-check is for a text-generation",
        ),
    ],
    ids=["folder_without_config", "not_a_generative_model", "weights_missing", "check_flag_on_a_plain_export"],
)
def test_cli_refuses_what_is_not_a_generation_export(tmp_path, make_target, flags, message):
    (tmp_path / "models.py").write_text(
        CLI_MODELS
        + "\n\n@exporter.export_target\ndef small():\n    return torch.nn.Linear(2, 3), (torch.randn(1, 2),)\n"
    )
    target = make_target(tmp_path)
    run = subprocess.run(
        [console_script("onnxlens-export"), str(target), *flags, "-o", str(tmp_path / "o")],
        capture_output=True,
        text=True,
    )
    assert run.returncode != 0 and message in run.stdout + run.stderr and not (tmp_path / "o").exists()


def test_export_target_checks_the_task():
    with pytest.raises(ValueError, match="unknown export task 'translation'"):
        exporter.export_target(task="translation")


def test_a_model_that_caches_recurrent_states_is_refused_with_what_to_do(tmp_path):
    """Mamba's cache is convolution and SSM states, not keys and values: refused before any export, with the
    export that works (a forward pass without the cache), and nothing written."""
    model = MambaForCausalLM(MambaConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, state_size=4)).eval()
    with pytest.raises(ValueError, match=r"MambaForCausalLM caches recurrent states \(LinearAttentionLayer") as raised:
        exporter.export_for_generation(model, tmp_path / "out")
    assert "exporter.dynamo_export(model, input_ids)" in str(raised.value) and not (tmp_path / "out").exists()


def test_fake_mode_export_writes_the_checkpoint_and_generates(tmp_path):
    real = tiny_model("llama")
    weights = {**real.state_dict(), **dict(real.named_buffers())}  # rotary inv_freq is not in the state dict
    with exporter.enable_fake_mode() as ctx:
        fake = AutoModelForCausalLM.from_config(CONFIGS["llama"]()).eval()
    result = exporter.export_for_generation(
        fake, tmp_path, export_options=exporter.ExportOptions(fake_context=ctx), model_state_dict=weights
    )
    assert result.parity is None and "model_initializers" in result.files
    (skipped,) = [d for d in result.export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0022"]
    assert skipped.properties["generationCheck"] == "skipped"
    initializers = {t.name: t for t in onnx.load(result.model_path, load_external_data=False).graph.initializer}
    assert initializers["model.model.embed_tokens.weight"].data_location == onnx.TensorProto.EXTERNAL
    assert all(
        t.data_location == onnx.TensorProto.EXTERNAL for name, t in initializers.items() if name.startswith("model.")
    )
    session = ort.InferenceSession(result.model_path, providers=["CPUExecutionProvider"])
    ids, mask = PADDED, PADDED_MASK
    assert greedy_generate(session, np.array(ids), np.array(mask), NEW_TOKENS, {2}, 0).tokens.tolist() == generate(
        real, ids, mask
    )
    assert genai_generate(tmp_path, PROMPT[:1]) == generate(real, PROMPT[:1])


def test_fake_mode_needs_weights(tmp_path):
    with exporter.enable_fake_mode() as ctx:
        fake = AutoModelForCausalLM.from_config(CONFIGS["gpt2"]()).eval()
    with pytest.raises(ValueError, match="pass model_state_dict"):
        exporter.export_for_generation(fake, tmp_path, export_options=exporter.ExportOptions(fake_context=ctx))


@pytest.mark.parametrize(
    "dtype, onnx_type", [(torch.float16, onnx.TensorProto.FLOAT16), (torch.bfloat16, onnx.TensorProto.BFLOAT16)]
)
def test_half_precision_is_kept(tmp_path, dtype, onnx_type):
    result = exporter.export_for_generation(tiny_model("llama").to(dtype), tmp_path)
    graph = onnx.load(result.model_path).graph
    assert {v.type.tensor_type.elem_type for v in [*graph.input[3:], *graph.output]} == {onnx_type}
    assert {t.data_type for t in graph.initializer if np.prod(t.dims) >= 64 * 64} == {onnx_type}  # the weights
    (check,) = [d for d in result.export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0022"]
    if dtype == torch.float16:  # generated and compared with generate() in float16
        assert result.parity.matched and check.properties["generationCheck"] == "passed"
    else:  # onnxruntime's CPU provider has no bf16 MatMul: a warning, not a verdict
        assert (
            result.parity is None and check.level.name == "WARNING" and check.properties["generationCheck"] == "skipped"
        )


class GenerateRaises(type(tiny_model("llama"))):
    """A causal LM whose own generation raises (its forward, which the export captures, runs)."""

    def prepare_inputs_for_generation(self, *args, **kwargs):
        raise RuntimeError("this model's generation is broken")


def test_a_model_whose_generate_raises_is_exported_with_the_check_skipped(tmp_path):
    """Without generate()'s tokens there is nothing to check against: a warning, the folder written, no raise."""
    source = tiny_model("llama")
    model = GenerateRaises(source.config).eval()
    model.load_state_dict(source.state_dict())
    result = exporter.export_for_generation(model, tmp_path)
    assert result.parity is None and os.path.exists(result.model_path)
    (check,) = [d for d in result.export_output.diagnostic_context.diagnostics if d.rule.id == "FXE0022"]
    assert check.level.name == "WARNING" and check.properties["generationCheck"] == "skipped"
    assert "generate() raises RuntimeError: this model's generation is broken" in check.message
    assert check.location.path == __file__ and "raise RuntimeError" in check.location.snippet


@pytest.mark.parametrize("gap, near_tie", [(5e-4, True), (0.25, False)])
def test_a_divergence_between_nearly_tied_logits_is_a_near_tie(gap, near_tie):
    from exporter.generation.check import first_divergence

    expected, produced = np.array([[7, 3, 5]]), np.array([[7, 3, 6]])
    eager = [np.zeros((1, 10), np.float32) for _ in range(3)]
    ort_logits = [x.copy() for x in eager]
    eager[2][0, 5], eager[2][0, 6] = 1.0, 1.0 - gap  # eager prefers 5 by `gap`
    ort_logits[2][0, 6] = 0.1  # onnxruntime prefers 6 by 0.1
    d = first_divergence(expected, produced, eager, ort_logits, 3, tolerance=1e-3)
    assert (d.step, d.row, d.expected, d.produced, d.near_tie) == (2, 0, 5, 6, near_tie)
    assert d.margin == pytest.approx(0.1, rel=1e-6) and d.eager_margin == pytest.approx(gap, rel=1e-3)


class Router(torch.nn.Module):
    """A mixture-of-experts router: 2 of 4 experts by score. A zero hidden state (a padding token's zero
    embedding) scores every expert equally."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = torch.nn.Linear(3, 4, bias=False)

    def forward(self, hidden):
        return self.gate(hidden.flatten(0, -2)).topk(2, dim=-1)  # MARK: topk


def test_top_k_ties_are_recorded_by_decoding_step_and_row():
    from exporter.generation.topk_ties import TopKTies

    router, batch = Router(), 2
    with TopKTies(router, batch) as ties:
        router(torch.zeros(batch, 5, 3))  # the prefill (padding included): not attributed to a row
        router(torch.stack([torch.zeros(1, 3), torch.ones(1, 3)]))  # step 1: row 0 ties
        router(torch.ones(batch, 1, 3))  # step 2: a positive input scores the experts apart
    assert ties.rows == {1: {0}}
    line = next(i for i, text in enumerate(open(__file__), 1) if "# MARK: topk" in text)
    assert ties.where == f"{__file__}:{line}"
    assert [ties.explains(1, 0), ties.explains(4, 0), ties.explains(0, 0), ties.explains(4, 1)] == [
        True,
        True,
        False,
        False,
    ]
    router(torch.zeros(batch, 1, 3))  # after the block: nothing is recorded
    assert ties.rows == {1: {0}}


@pytest.mark.parametrize("row, level", [(0, "WARNING"), (1, "ERROR")])
def test_a_divergence_after_a_top_k_tie_in_its_row_is_a_warning(row, level):
    """Tied router scores explain a divergence in their row, not in another."""
    from exporter.diagnostics import DiagnosticContext
    from exporter.generation.check import GreedyResult, report
    from exporter.generation.topk_ties import TopKTies

    expected = np.array([[7, 3, 5], [4, 4, 4]])
    produced = expected.copy()
    produced[row, 2] = 9
    logits = [np.zeros((2, 10), np.float32) for _ in range(3)]
    for step, values in enumerate(logits):
        values[np.arange(2), expected[:, step]] = 1.0  # eager's choice by a clear margin
    ort_logits = [x.copy() for x in logits]
    ort_logits[2][row, 9] = 2.0
    ties = TopKTies(Router(), 2)
    ties.rows, ties.where = {1: {0}}, "router.py:9"
    ctx = DiagnosticContext()
    parity = report(ctx, expected, logits, GreedyResult(produced, ort_logits, 1.0, [1.0, 1.0]), 1e-3, ties)
    (diagnostic,) = ctx.diagnostics
    assert diagnostic.level.name == level and parity.divergence.row == row
    assert ("top-k (router.py:9) chose among equal values" in diagnostic.message) == (level == "WARNING")
