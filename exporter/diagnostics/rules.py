"""The diagnostic rules the exporter reports under (ids and names kept from PyTorch 2.1)."""

from __future__ import annotations

import dataclasses
import enum
import logging

HELP_BASE = "https://github.com/onnxlens/onnxlens/blob/main/docs/rules.md"


class Level(enum.IntEnum):
    """Severity of a result; the values equal the `logging` levels DEBUG/INFO/WARNING/ERROR."""

    NONE = logging.DEBUG
    NOTE = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR


TOOL_TAG = "onnx-export"  # every rule's first tag


@dataclasses.dataclass(frozen=True)
class Rule:
    """A rule and its metadata (GitHub code scanning shows `tags`, `precision` and `problem_severity`:
    "error", "warning" or "recommendation", the severity of the problems it reports)."""

    id: str
    name: str
    short_description: str
    full_description: str
    help: str
    default_level: Level = Level.NONE
    tags: tuple[str, ...] = ()
    precision: str = "high"  # very-high, high, medium, low: how often a reported problem is a real one
    problem_severity: str = "recommendation"

    @property
    def help_uri(self) -> str:
        return f"{HELP_BASE}#{self.id.lower()}-{self.name}"

    @property
    def all_tags(self) -> tuple[str, ...]:
        return (TOOL_TAG, *self.tags)

    @property
    def help_markdown(self) -> str:
        """The help as markdown: what the rule reports, how to fix it, the reference page."""
        return f"{self.full_description}\n\n**How to fix:** {self.help}\n\n[{self.id} {self.name}]({self.help_uri})"


FX_GRAPH_TO_ONNX = Rule(
    "FXE0007",
    "fx-graph-to-onnx",
    "Transforms graph from FX IR to ONNX IR.",
    "Translates the captured FX graph to an ONNX graph, node by node (see FXE0008). "
    "FX passes run before this step (FXE0010).",
    "Set DiagnosticOptions(verbosity_level=logging.DEBUG) to record every node's translation.",
    tags=("translation",),
    precision="very-high",
    problem_severity="recommendation",
)
FX_NODE_TO_ONNX = Rule(
    "FXE0008",
    "fx-node-to-onnx",
    "Transforms an FX node to an ONNX node.",
    "placeholder nodes become graph inputs or initializers, call_function nodes are translated "
    "by the ONNX function the registry holds for their operator, output nodes become graph outputs.",
    "If a node fails to translate, the message names the operator and the ONNX function used; "
    "register a replacement with OnnxRegistry.register_op.",
    tags=("translation",),
    precision="very-high",
    problem_severity="recommendation",
)
FX_PASS = Rule(
    "FXE0010",
    "fx-pass",
    "FX graph transformation during ONNX export before converting from FX IR to ONNX IR.",
    "Decomposition, functionalization, type promotion and naming passes run on the FX graph.",
    "A failing pass is an exporter bug or a model construct the pass does not handle; "
    "the message holds the pass name and the exception.",
    tags=("fx-pass",),
    precision="high",
    problem_severity="error",
)
NO_SYMBOLIC_FUNCTION = Rule(
    "FXE0011",
    "no-symbolic-function-for-call-function",
    'Cannot find symbolic function to convert the "call_function" FX node to ONNX.',
    "The operator called at this line has no ONNX translation in the registry. For a torch.library.custom_op "
    "whose Python implementation exports (its ops have translations), the result carries an onnxscript function "
    "generated from that implementation and checked against PyTorch in onnxruntime (property generatedFunction: "
    "its imports, code and how it was checked); a note says why when none could be generated.",
    "Register the generated function (the editor's quick fix inserts it with its register_op call), or "
    "write an onnxscript function for the operator and register it: "
    "registry = exporter.OnnxRegistry(); registry.register_op(fn, namespace, op_name, overload); "
    "exporter.dynamo_export(model, *args, export_options=exporter.ExportOptions(onnx_registry=registry)). "
    "Or rewrite the model using operators that are supported.",
    Level.ERROR,
    tags=("unsupported-operator",),
    precision="very-high",
    problem_severity="error",
)
UNSUPPORTED_FX_NODE_ANALYSIS = Rule(
    "FXE0012",
    "unsupported-fx-node-analysis",
    "Result from FX graph analysis to reveal unsupported FX nodes.",
    "All operators in the graph that have no ONNX translation, found before translation starts.",
    "Register an ONNX function for each listed operator (see FXE0011), or avoid them in the model.",
    Level.ERROR,
    tags=("unsupported-operator",),
    precision="very-high",
    problem_severity="error",
)
OP_LEVEL_DEBUGGING = Rule(
    "FXE0013",
    "op-level-debugging",
    "Report any op level validation failure in warnings.",
    "Each translated node's ONNX function is run on the node's real input values and compared "
    "with the PyTorch operator: for every node with op-level debug, and on every export for the "
    "nodes translated by functions you registered (a stub or a wrong custom function is a warning).",
    "A mismatch points at an ONNX function that computes something else than the PyTorch op: "
    "fix the custom function registered for it, or report the torchlib function.",
    tags=("accuracy",),
    precision="high",
    problem_severity="warning",
)
FIND_OPSCHEMA_MATCHED_SYMBOLIC_FUNCTION = Rule(
    "FXE0014",
    "find-opschema-matched-symbolic-function",
    "Find the OnnxFunction that matches the input/attribute dtypes by comparing them with their opschemas.",
    "Find the OnnxFunction that matches the input dtypes by comparing them with their opschemas. "
    "A warning will be issued if the matched OnnxFunction is not an exact match.",
    "A nearest match may compute with other dtypes than the model: enable op_level_debug to check "
    "the numbers, or register a function whose schema matches.",
    tags=("dtype",),
    precision="medium",
    problem_severity="warning",
)
FX_NODE_INSERT_TYPE_PROMOTION = Rule(
    "FXE0015",
    "fx-node-insert-type-promotion",
    "Determine if type promotion is required for the FX node. Insert cast nodes if needed.",
    "ONNX operators need inputs of one type where PyTorch promotes implicitly; explicit casts are "
    "inserted following torch's elementwise type promotion rules.",
    "Nothing to do unless the promoted type is unexpected; cast explicitly in the model to control it.",
    tags=("dtype",),
    precision="high",
    problem_severity="recommendation",
)
FIND_OPERATOR_OVERLOADS_IN_ONNX_REGISTRY = Rule(
    "FXE0016",
    "find-operator-overloads-in-onnx-registry",
    "Find the list of OnnxFunction of the PyTorch operator in onnx registry.",
    "This rule involves finding the list of OnnxFunction for the PyTorch operator overload in the "
    "ONNX registry. If the operator overload is not supported but its default overload is, a warning "
    "will be issued. If both the operator overload and its default overload are not supported, an "
    "error will be issued.",
    "On a fallback to the default overload, check the output (op_level_debug) or register a function "
    "for the exact overload.",
    tags=("unsupported-operator",),
    precision="medium",
    problem_severity="warning",
)
GRAPH_CAPTURE = Rule(
    "FXE0017",
    "fx-graph-capture",
    "Capture the model as an FX graph with torch.export.",
    "One error at the line that stopped the capture, saying in your terms what it does that a graph "
    "cannot (torch's own message is in the result's properties), plus a note for each capture "
    "strategy tried (non-strict torch.export, TorchDynamo) and why it failed.",
    "Capture fails on Python the tracer cannot follow, most often code that depends on tensor values. "
    "A branch (`if x.sum() > 0:`): use torch.cond(pred, true_fn, false_fn, operands), or make the "
    "condition depend on shapes only. A value used as a size or index (`n = x.item()`): state what "
    "holds with torch._check(...) (e.g. torch._check(n > 0)). Or compute it outside forward() and "
    "pass it in.",
    tags=("graph-capture",),
    precision="high",
    problem_severity="error",
)
INPUT_OUTPUT_ADAPTATION = Rule(
    "FXE0018",
    "input-output-adaptation",
    "Adapt PyTorch inputs and outputs to the flat tensor lists of the ONNX model.",
    "Binds the example inputs to the model's signature and records how nested inputs and outputs "
    "are flattened, and which non-tensor inputs are baked into the graph as constants.",
    "Make inputs tensors if they must vary at run time; Python numbers are constants in the ONNX model.",
    tags=("inputs-outputs",),
    precision="high",
    problem_severity="recommendation",
)
ONNX_MODEL_CHECK = Rule(
    "FXE0019",
    "onnx-model-check",
    "Check and optimize the ONNX model.",
    "Runs onnxscript's optimizer and onnx.checker on the exported model, with strict shape and type "
    "inference (what onnxruntime checks when it loads a model). A failure is an error, at the source "
    "line of the node it names.",
    "A checker failure is an exporter or torchlib bug, or a registered function whose result type is not "
    "PyTorch's: check that function, or report it with the SARIF log attached.",
    tags=("onnx-checker",),
    precision="very-high",
    problem_severity="error",
)
DIMENSION_SPECIALIZED = Rule(
    "FXE0020",
    "dimension-specialized",
    "An input dimension asked to be dynamic came out static.",
    "One result per input dimension that was asked to be dynamic (dynamic_shapes=True, Dim.AUTO, "
    "Dim.DYNAMIC or a named Dim) but that the model's code fixed to its example size, at the line "
    "that fixed it (a shape comparison, a view/reshape with that size, a weight of that size), with "
    "the call stack. The exported graph accepts only that size there. With a named Dim, torch.export "
    'refuses the export instead ("Constraints violated"): that is an error at the same line, with '
    "torch's suggested fix in the message and the properties. Where only torch.export's guards "
    "fail (a size of 1 a reshape inside PyTorch rules out, or a strided size of 1 a CNN's residual add "
    "does) and they hold at the example's sizes, the graph is captured with them as assumptions instead, a "
    "note for each, as a lower bound where it is one (`height >= 33`): onnxruntime does not check them. "
    "Where sizes 0/1 are kept symbolic (a KV cache's), relations between dimensions are assumptions too "
    "(BLOOM's total == past + new); guards that keep the sizes to a set (LeViT's patches == 196, LongT5's "
    "Mod(length, 5) == 0) are no assumptions: the refusal "
    "stands. Where no line of the user's fixed the size, the message names the library's line and its file "
    "(transformers/models/longt5/modeling_longt5.py:174). "
    "Where the capture narrowed a dimension's range below the one asked for (`if x.shape[1] > 100:` with "
    "Dim.AUTO), a warning at that line (a note where PyTorch's own checks did it: a kernel needs 9 pixels), "
    "property range: the graph is right only there. A named Dim that torch.export refuses only for such a "
    "range is captured the same way when PyTorch's checks narrowed it; narrowed by a line of the model, it stays "
    "an error at that line. An equality of sizes a line made torch.export assume that it could neither fix to a "
    "size nor keep as a range (`if n // 2 == 8:`; DINOv2's position table at its pretrained size) is dropped "
    "by torch.export: a warning at that line (property assumption), the graph being right only where it holds. "
    "A note lists the graph's symbolic input and output dimensions. The second-size "
    "check (on by default for dynamic exports) runs the final model at other sizes of its dynamic dimensions "
    "against eager PyTorch: an error where it differs or onnxruntime fails, naming the dimensions whose "
    "change breaks the graph; a warning (property secondSizeCheck: numerics) where a graph exported "
    "statically at those sizes differs from eager as much: the model's numerics there, not the dynamic shapes; "
    "a warning too where eager PyTorch runs at none of the sizes tried (nothing checked the dimensions).",
    "If the size really varies, make that line work for any size (compare sizes with torch._check, "
    "use -1 in view/reshape, derive sizes from the input's shape). If it is always that size, mark the "
    "dimension Dim.STATIC (or give no Dim for it) to say so. A size of 1 (or 0) in the example that the "
    "code compares (`if x.shape[0] == 1:`) is fixed only because of the example: give it another size; so "
    "is a branch on an equality of sizes that holds at the example (an example where it is false takes the "
    "path every size can). "
    "In the editor, quick fixes do both: they change the example's literal size 1 to 2, or apply "
    "torch's suggested fix to the target's dynamic_shapes, and export the target again.",
    tags=("dynamic-shapes",),
    precision="high",
    problem_severity="warning",
)
ACCURACY_DIVERGENCE = Rule(
    "FXE0021",
    "accuracy-divergence",
    "The exported model gives other numbers than eager PyTorch in onnxruntime.",
    "With ExportOptions(verify=True) (CLI --verify, setting onnxlens.verify) or export_output.verify(*args, **kwargs), "
    "the final ONNX model (after optimization, as saved) runs in onnxruntime and every output is compared with eager "
    "PyTorch: a note gives each output's max abs / rel error and an error histogram (properties outputs). Tolerances "
    "per dtype (atol, rtol): float64 1e-6, 1e-5; float32 1e-4, 1e-3; float16 1e-2, 1e-2; bfloat16 5e-2, 5e-2; "
    'integers and booleans exact; ExportOptions(verify_tolerances={"float32": (atol, rtol)}) overrides them. '
    "When an output diverges, the values of the FX graph's nodes are compared in one more onnxruntime session, in "
    "topological order: the error is at the source line of the first node that diverges while its inputs match, "
    "naming the ATen op, the ONNX ops it became, its error and tolerance (later nodes that only inherit it are "
    "counted: inheritedDivergences). It says whether the unoptimized model matches (then the optimizer is at fault). "
    "Saving the model writes a reproducer beside it, <stem>_repro/ (property reproducer): that node as an ONNX "
    "model, its inputs, PyTorch's outputs and run.py, which exits 1 while onnxruntime differs. Values drawn at "
    "random (ops PyTorch tags nondeterministic_seeded: rand, randn_like, training-mode dropout) and what depends "
    "on them are not compared, as onnxruntime draws other numbers: an output that depends on them is a warning at "
    "the line that draws them (property randomOutputs), not a verified one. Indices that pick other elements of "
    "equal values (topk, sort, max(dim) over ties, whose order PyTorch does not define) do not diverge: when they "
    "are all that differs, a warning at the op (property tiedOutputs). When onnxruntime has no kernel for a type "
    "the model uses (bf16 on its CPU provider), verification is skipped with a note; when it fails to run the model "
    "otherwise, that is the error.",
    "Check the ONNX function of the named op (a function you registered, or torchlib's) and run the reproducer's "
    "run.py; when the optimizer is at fault, export with optimize=False and report the reproducer to onnxscript. "
    "Values that overflow at the model's scale point at a translation that needs another formulation.",
    tags=("accuracy",),
    precision="high",
    problem_severity="error",
)

GENERATION_DIVERGENCE = Rule(
    "FXE0022",
    "generation-divergence",
    "Greedy generation with the exported model differs from the PyTorch model's.",
    "exporter.export_for_generation checks what it exported by generating: greedy generation of N tokens "
    "(default 16) from a prompt (default: a left-padded batch of two) in onnxruntime with the KV cache "
    "(prefill with a past of length 0, then one token per step), token for token against "
    "model.generate(do_sample=False). A note when every token matches; an error at the first step where "
    "one differs, naming the step (0 is the token the prefill produced), the prompt, the expected and the "
    "produced token and the logit margins (onnxruntime's logit of the produced token minus that of the "
    "expected one; eager's of the expected minus the produced). Where eager PyTorch's two logits are "
    "within the tie tolerance (1e-3 for float32, 5e-2 for float16, 1e-1 for bfloat16) it is a warning: "
    "rounding alone may pick either token. An error too when onnxruntime cannot run the model; a "
    "warning when its CPU provider has no kernel for it (bf16), and a note under fake mode (no weights): "
    "then the check is skipped.",
    "A divergence at step 0 is in the prefill graph; a later one in decoding with the cache (past "
    "inputs, the attention mask, position ids). Export with ExportOptions(op_level_debug=True) through "
    "exporter.dynamo_export on the same model to find the op, or compare the logits of that step.",
    tags=("generation", "accuracy"),
    precision="high",
    problem_severity="error",
)

QUANTIZATION_QUALITY = Rule(
    "FXE0023",
    "quantization-quality",
    "What lowering the weights' precision did to the model's answers.",
    "Every export_for_generation at a precision other than fp32 (int4, int8, fp16) measures the exported "
    "model against the fp32 PyTorch model: greedy-token agreement, the fraction of N greedy tokens (N = "
    "max_new_tokens, from the fixed prompts of the generation check) that the exported model predicts "
    "identically when fed the PyTorch model's own continuation, and the perplexity of both on a fixed text "
    "(the tokenizer's encoding of a fixed paragraph, else the prompts with their greedy continuation) with "
    "its relative change. The figures are in the result's properties (tokenAgreement, tokens, perplexityFp32, "
    "perplexity, perplexityChange, keptGroups). A note when the agreement meets min_token_agreement (or none "
    "was asked); with min_token_agreement, the weight groups (decoder layers, the output head) whose "
    "quantization changes the logits most are kept one step higher (int8 in an int4 export, fp32 in an int8 "
    "one) until it is met, and a warning when it cannot be met even so.",
    "Raise the precision (int8 rather than int4), keep the output head in int8 (int8_head), use a smaller "
    "block_size, or pass min_token_agreement to keep the most sensitive layers at a higher precision. The "
    "figures only mean something for a trained model: random weights predict near ties everywhere.",
    tags=("quantization", "accuracy"),
    precision="medium",
    problem_severity="warning",
)

KERNEL_NOT_FUSED = Rule(
    "FXE0024",
    "kernel-not-fused",
    "A layer's attention, rotary embedding or normalization did not become onnxruntime's fused kernel.",
    "export_for_generation rewrites (fused_kernels, on by default) the patterns of each decoder layer into "
    "onnxruntime's contrib ops: RMS normalizations with their residual add into "
    "SkipSimplifiedLayerNormalization / SimplifiedLayerNormalization, rotary embeddings into "
    "RotaryEmbedding, attention into GroupQueryAttention. A warning, located at the layer's module, names "
    "what did not fuse in it (the layer then runs the standard ops: correct, slower); a note gives the fused "
    "fraction of the layers (e.g. 8/8 layers fused).",
    "A custom attention or normalization computes something the fused kernels' patterns do not recognize: "
    "write it as transformers' own layers do (torch.nn.functional.scaled_dot_product_attention, x * "
    "torch.rsqrt(mean(x**2) + eps) * weight, rotate_half), or export with fused_kernels=False to keep the "
    "portable standard-op graph on purpose.",
    tags=("generation", "performance"),
    precision="high",
    problem_severity="warning",
)

EXPORT_TARGET = Rule(
    "FXE0025",
    "export-target",
    "The export target could not be loaded, called or exported.",
    "An export check (onnxlens-export check) reports here what stopped a target before the exporter's own "
    "rules could: its file raised while being imported, the target function raised or returned something other "
    "than (model, args[, kwargs]), or the export failed without a located result. The result is at the line that "
    "raised in your code, else at the target's definition.",
    "Run the file or call the target in Python to see the full traceback; a target returns (model, args) or "
    "(model, args, kwargs) with a callable model.",
    Level.ERROR,
    tags=("export-target",),
    precision="very-high",
    problem_severity="error",
)

GENAI_INCOMPATIBLE = Rule(
    "FXE0026",
    "genai-incompatible",
    "onnxruntime-genai cannot run the exported folder (onnxruntime can).",
    "export_for_generation writes genai_config.json for onnxruntime-genai, whose KV cache has one head count and "
    "one head size for every layer's keys and values. A model whose cache does not (DeepSeek's and MiniCPM3's "
    "multi-head latent attention cache keys of one size and values of another) gets a warning: model.onnx still "
    "runs in onnxruntime with its past_key_values inputs, as the generation check runs it, but genai's "
    "generator would feed caches of the wrong shape.",
    "Run the folder's model.onnx with onnxruntime directly (the past_key_values.* inputs, present.* outputs), "
    "or with optimum's ORTModelForCausalLM, rather than with onnxruntime-genai.",
    tags=("generation",),
    precision="very-high",
    problem_severity="warning",
)

TRAINING_MODE = Rule(
    "FXE0027",
    "training-mode",
    "The model is exported in training mode.",
    "A model whose BatchNorm modules are in training mode (model.training is True, the default of a new module) "
    "normalizes with each batch's own mean and variance instead of its running statistics, and its dropouts drop "
    "values at random: the exported graph computes that, so it gives other outputs than the model in evaluation, "
    "and one sample at a time other outputs than in a batch. A warning at the first such call names the modules "
    "(property trainingModules). A BatchNorm built with track_running_stats=False always uses the batch's "
    "statistics and is not reported.",
    "Call model.eval() before exporting for inference. To export the training graph on purpose (on-device "
    "training), leave it in training mode and ignore this warning.",
    tags=("correctness",),
    precision="high",
    problem_severity="warning",
)

ALL_RULES: tuple[Rule, ...] = (
    FX_GRAPH_TO_ONNX,
    FX_NODE_TO_ONNX,
    FX_PASS,
    NO_SYMBOLIC_FUNCTION,
    UNSUPPORTED_FX_NODE_ANALYSIS,
    OP_LEVEL_DEBUGGING,
    FIND_OPSCHEMA_MATCHED_SYMBOLIC_FUNCTION,
    FX_NODE_INSERT_TYPE_PROMOTION,
    FIND_OPERATOR_OVERLOADS_IN_ONNX_REGISTRY,
    GRAPH_CAPTURE,
    INPUT_OUTPUT_ADAPTATION,
    ONNX_MODEL_CHECK,
    DIMENSION_SPECIALIZED,
    ACCURACY_DIVERGENCE,
    GENERATION_DIVERGENCE,
    QUANTIZATION_QUALITY,
    KERNEL_NOT_FUSED,
    EXPORT_TARGET,
    GENAI_INCOMPATIBLE,
    TRAINING_MODE,
)


def rules_markdown() -> str:
    """The rules reference page (docs/rules.md), which each rule's helpUri points into."""
    intro = "Every SARIF result of an export is reported under one of these rules."
    lines = ["# onnxlens diagnostic rules", "", intro, ""]
    for rule in ALL_RULES:
        lines += [
            f"## {rule.id} {rule.name}",
            "",
            f"**{rule.short_description}**",
            "",
            rule.full_description,
            "",
            f"*How to fix:* {rule.help}",
            "",
        ]
    return "\n".join(lines)


if __name__ == "__main__":  # python -m exporter.diagnostics.rules > docs/rules.md
    print(rules_markdown(), end="")
