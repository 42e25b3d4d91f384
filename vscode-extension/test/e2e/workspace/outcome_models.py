"""Models whose exports have each outcome the editor shows (e2e): a model that diverges in onnxruntime
(wrong, found by Export and verify), a dynamic export that comes out all static (degraded), and one
that cannot be captured (failed: no model)."""

import torch

import exporter


class FloorDivides(torch.nn.Module):
    def forward(self, counts):
        return counts // 0.1  # MARK: diverges


class FixesEveryDim(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x).reshape(8)  # MARK: fixes-every-dim


class Branchy(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # MARK: data-dependent
            return x * 2
        return x


@exporter.export_target
def divides():
    return FloorDivides(), (torch.tensor([1, 3, 7]),)


@exporter.export_target(dynamic_shapes=True)
def all_static():
    return FixesEveryDim(), (torch.randn(2, 8),)


@exporter.export_target
def branchy():
    return Branchy(), (torch.randn(2, 4),)
