"""onnxlens language server: exports on request from the editor, SARIF results as editor problems."""
