"""torch_dlrm: Ember's DLRM model in PyTorch, the one model behind both PyTorch yardsticks
(bench/dense/torch_dense.py on the CPU, bench/gpu/torch_dense_gpu.py on a GPU).

The layout is dlrm_s_pytorch.py's: a bottom MLP, the 'dot' interaction (pairs of distinct
vectors only), a top MLP. The top MLP ends in a sigmoid (for BCELoss) or, with logit=True, in
the logit itself (for BCEWithLogitsLoss, the fused loss Ember's kernels match). The pooled
sparse vectors come either as a list of S [B, D] tensors or as one [B, S, D] tensor; each form
is concatenated as it is, with no extra copy."""
import json

import torch


def write_results(path, out):
    """Writes a yardstick's results as indented JSON to path (nothing when path is None), the
    one ending both yardsticks share; returns main's exit status."""
    if path:
        with open(path, "w") as f:
            json.dump(out, f, indent=2)
    return 0


def kaggle_mlps(S, D):
    """The bottom and top MLP widths of the Kaggle shape with S tables of dimension D."""
    return [13, 512, 256, 64, 16], [D + (S + 1) * S // 2, 512, 256, 1]


class DLRM(torch.nn.Module):
    def __init__(self, bot, top, logit=False):
        super().__init__()

        def mlp(ln, last):
            layers = []
            for i in range(len(ln) - 1):
                layers.append(torch.nn.Linear(ln[i], ln[i + 1]))
                act = last if i == len(ln) - 2 else torch.nn.ReLU
                if act is not None:
                    layers.append(act())
            return torch.nn.Sequential(*layers)

        self.bot_l = mlp(bot, torch.nn.ReLU)
        self.top_l = mlp(top, None if logit else torch.nn.Sigmoid)
        self.li = self.lj = None

    def interact(self, x, ly):  # dlrm_s_pytorch.py interact_features, 'dot', not itself
        (batch_size, d) = x.shape
        parts = [x, ly.reshape(batch_size, -1)] if torch.is_tensor(ly) else [x] + ly
        T = torch.cat(parts, dim=1).view((batch_size, -1, d))
        Z = torch.bmm(T, torch.transpose(T, 1, 2))
        _, ni, nj = Z.shape
        if self.li is None:
            self.li = torch.tensor([i for i in range(ni) for j in range(i)], device=x.device)
            self.lj = torch.tensor([j for i in range(nj) for j in range(i)], device=x.device)
        return torch.cat([x, Z[:, self.li, self.lj]], dim=1)

    def forward(self, dense, ly):
        return self.top_l(self.interact(self.bot_l(dense), ly))
