"""Generation-ready exports of language models: KV-cache graphs, the generation check (FXE0022), genai_config.json."""
