"""A dynamic export whose example batch of 1 is what fixes the batch (e2e: the FXE0020 quick fix)."""

import torch

import exporter


class SqueezesOne(torch.nn.Module):
    def forward(self, x):
        if x.shape[0] == 1:  # MARK: fixes-batch
            x = x.squeeze(0).unsqueeze(0)
        return torch.softmax(x @ x.T, -1)


@exporter.export_target(dynamic_shapes=True)
def squeezes_one():
    x = torch.randn(1, 6)
    return SqueezesOne(), (x,)
