"""What a generation export wrote into its folder, and what its checks found: `GenerationExport` (a causal
LM; an encoder–decoder model's is `exporter.generation.seq2seq.Seq2SeqExport`)."""

from __future__ import annotations

import dataclasses
import os

from exporter.generation import quality
from exporter.generation.check import Parity
from exporter.output.program import ExportOutput

MODEL_FILE = "model.onnx"
SARIF_FILE = "model.sarif"


@dataclasses.dataclass
class GenerationExport:
    """What `export_for_generation` wrote, and what its generation check found."""

    output_dir: str
    files: list[str]  # written, relative to output_dir
    export_output: ExportOutput
    parity: Parity | None  # None when not checked (verify_generation=False, fake mode, no kernels, not fp32)
    export_seconds: float
    verify_seconds: float
    quality: quality.Quality | None = None  # a non-fp32 export's quality report (FXE0023)

    @property
    def model_path(self) -> str:
        return os.path.join(self.output_dir, MODEL_FILE)

    @property
    def check(self) -> str:
        """What the generation check found, or the quality report of a non-fp32 export, in a sentence."""
        if self.quality is not None:
            return self.quality.summary()
        return self.parity.summary() if self.parity is not None else "generation not verified"

    def summary(self) -> str:
        return f"{len(self.files)} files in {self.output_dir} ({', '.join(self.files)}); {self.check}"
