"""A tiny GPT-2 whose graph has about 3,000 ONNX nodes (e2e: the graph view's timings on a large model).

24 layers, exported unoptimized with dynamic shapes (the optimized 12-layer model has about 500 nodes).
"""

import torch

import exporter


@exporter.export_target(optimize=False, dynamic_shapes=True)
def gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_layer=24, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    return GPT2LMHeadModel(config).eval(), (torch.randint(0, 1000, (1, 16)),)
