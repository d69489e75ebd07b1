"""PyTorch DiT (Peebles & Xie, facebookresearch/DiT ``models.py``), used only for training and
for checking the NumPy model (``dstar.golden.dit``). Optional: needs the ``train`` extra (PyTorch).

Module names follow DiT's (``blocks[i].attn.qkv/proj``, ``blocks[i].mlp.fc1/fc2``,
``adaLN_modulation``) so that ``state_dict`` keys match the official checkpoints and the NumPy
weight file. Differences from DiT-XL/2: pixel space (1x32x32 digits), ``learn_sigma=False``.
"""

import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from dstar.golden.dit import DiTShape, pos_embed_2d


def modulate(x, shift, scale):
    return x * (1 + scale.unsqueeze(1)) + shift.unsqueeze(1)


def timestep_embedding(t, dim, max_period=10000):
    half = dim // 2
    freqs = torch.exp(-math.log(max_period) * torch.arange(half, dtype=torch.float32) / half)
    args = t[:, None].float() * freqs[None].to(t.device)
    return torch.cat([torch.cos(args), torch.sin(args)], dim=-1)


class TimestepEmbedder(nn.Module):
    def __init__(self, hidden, freq_dim):
        super().__init__()
        self.freq_dim = freq_dim
        self.mlp = nn.Sequential(nn.Linear(freq_dim, hidden), nn.SiLU(), nn.Linear(hidden, hidden))

    def forward(self, t):
        return self.mlp(timestep_embedding(t, self.freq_dim))


class LabelEmbedder(nn.Module):
    """Class embedding with one extra row (index ``num_classes``) for the null label of CFG."""

    def __init__(self, num_classes, hidden, dropout_prob):
        super().__init__()
        self.embedding_table = nn.Embedding(num_classes + 1, hidden)
        self.num_classes, self.dropout_prob = num_classes, dropout_prob

    def forward(self, labels, train):
        if train and self.dropout_prob > 0:
            drop = torch.rand(labels.shape[0], device=labels.device) < self.dropout_prob
            labels = torch.where(drop, self.num_classes, labels)
        return self.embedding_table(labels)


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        x = F.scaled_dot_product_attention(q, k, v)
        return self.proj(x.transpose(1, 2).reshape(b, n, c))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x), approximate="tanh"))


class DiTBlock(nn.Module):
    def __init__(self, hidden, heads, mlp_ratio):
        super().__init__()
        self.norm1 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.attn = Attention(hidden, heads)
        self.norm2 = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.mlp = Mlp(hidden, int(hidden * mlp_ratio))
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 6 * hidden))

    def forward(self, x, c):
        sh_msa, sc_msa, g_msa, sh_mlp, sc_mlp, g_mlp = self.adaLN_modulation(c).chunk(6, dim=1)
        x = x + g_msa.unsqueeze(1) * self.attn(modulate(self.norm1(x), sh_msa, sc_msa))
        x = x + g_mlp.unsqueeze(1) * self.mlp(modulate(self.norm2(x), sh_mlp, sc_mlp))
        return x


class FinalLayer(nn.Module):
    def __init__(self, hidden, patch, out_channels):
        super().__init__()
        self.norm_final = nn.LayerNorm(hidden, elementwise_affine=False, eps=1e-6)
        self.linear = nn.Linear(hidden, patch * patch * out_channels)
        self.adaLN_modulation = nn.Sequential(nn.SiLU(), nn.Linear(hidden, 2 * hidden))

    def forward(self, x, c):
        shift, scale = self.adaLN_modulation(c).chunk(2, dim=1)
        return self.linear(modulate(self.norm_final(x), shift, scale))


class PatchEmbed(nn.Module):
    def __init__(self, patch, in_ch, hidden):
        super().__init__()
        self.proj = nn.Conv2d(in_ch, hidden, kernel_size=patch, stride=patch, bias=True)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)


class DiT(nn.Module):
    def __init__(self, shape: DiTShape, class_dropout_prob: float = 0.1):
        super().__init__()
        self.shape = s = shape
        self.x_embedder = PatchEmbed(s.patch, s.in_channels, s.hidden)
        self.t_embedder = TimestepEmbedder(s.hidden, s.freq_dim)
        self.y_embedder = LabelEmbedder(s.num_classes, s.hidden, class_dropout_prob)
        pe = pos_embed_2d(s.hidden, s.image_size // s.patch)
        self.register_buffer("pos_embed", torch.from_numpy(pe).float()[None], persistent=False)
        self.blocks = nn.ModuleList(DiTBlock(s.hidden, s.heads, s.mlp_ratio)
                                    for _ in range(s.depth))
        self.final_layer = FinalLayer(s.hidden, s.patch, s.in_channels)
        self._init_weights()

    def _init_weights(self):
        def basic(m):
            if isinstance(m, nn.Linear):
                nn.init.xavier_uniform_(m.weight)
                nn.init.zeros_(m.bias)
        self.apply(basic)
        w = self.x_embedder.proj.weight.data
        nn.init.xavier_uniform_(w.view(w.shape[0], -1))
        nn.init.zeros_(self.x_embedder.proj.bias)
        nn.init.normal_(self.y_embedder.embedding_table.weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[0].weight, std=0.02)
        nn.init.normal_(self.t_embedder.mlp[2].weight, std=0.02)
        for blk in self.blocks:
            nn.init.zeros_(blk.adaLN_modulation[-1].weight)
            nn.init.zeros_(blk.adaLN_modulation[-1].bias)
        for p in (*self.final_layer.adaLN_modulation[-1].parameters(),
                  *self.final_layer.linear.parameters()):
            nn.init.zeros_(p)

    def unpatchify(self, x):
        s = self.shape
        g = s.image_size // s.patch
        x = x.reshape(x.shape[0], g, g, s.patch, s.patch, s.in_channels)
        return torch.einsum("nhwpqc->nchpwq", x).reshape(x.shape[0], s.in_channels,
                                                        s.image_size, s.image_size)

    def forward(self, x, t, y, train=False):
        x = self.x_embedder(x) + self.pos_embed
        c = self.t_embedder(t) + self.y_embedder(y, train)
        for blk in self.blocks:
            x = blk(x, c)
        return self.unpatchify(self.final_layer(x, c))


def to_numpy_weights(model: DiT) -> dict[str, np.ndarray]:
    """The ``state_dict`` as float32 NumPy arrays (the layout ``dstar.golden.dit`` loads)."""
    return {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}


def from_numpy_weights(model: DiT, weights: dict[str, np.ndarray]) -> DiT:
    model.load_state_dict({k: torch.from_numpy(np.asarray(v)) for k, v in weights.items()})
    return model
