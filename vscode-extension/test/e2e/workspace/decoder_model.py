"""A GPT-2-sized decoder written here (e2e: the graph view at scale, its nodes at this file's lines).

24 layers, exported unoptimized with dynamic shapes: about as many ONNX nodes as GPT-2's export, every one of them
at a line of this file (a model from transformers has its lines in site-packages).
"""

import math

import torch
from torch import nn

import exporter


class Attention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = (y.view(b, t, self.heads, d // self.heads).transpose(1, 2) for y in self.qkv(x).split(d, dim=-1))
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)  # MARK: attention-scores
        causal = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        weights = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        return self.proj((weights @ v).transpose(1, 2).reshape(b, t, d))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = Attention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))  # MARK: attention-residual
        return x + self.mlp(self.ln_2(x))  # MARK: mlp-residual


class Decoder(nn.Module):
    def __init__(self, layers: int = 24, width: int = 64, heads: int = 4, vocab: int = 1000, context: int = 64):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)

    def forward(self, ids):
        x = self.wte(ids) + self.wpe(torch.arange(ids.shape[1], device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


@exporter.export_target(optimize=False, dynamic_shapes=True)
def decoder():
    torch.manual_seed(0)
    return Decoder().eval(), (torch.randint(0, 1000, (1, 16)),)
