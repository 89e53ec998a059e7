"""Whisper's encoder input: log-mel features through two convolutions, then the encoder's position table.

Dimensions: B windows, M mel bins, F feature frames (3000 for 30 s), S encoder positions (F / 2), D model size.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

FRAMES_PER_POSITION = 2  # the second convolution's stride


class AudioFront(nn.Module):
    """conv1 (k3) + GELU, conv2 (k3, stride 2) + GELU, plus the checkpoint's table (sinusoids Whisper stores as
    weights, read as they are): features (B, M, F) → (B, S, D). A window is always the whole table's length, as
    transformers' encoder demands."""

    def __init__(self, num_mel_bins: int, d_model: int, positions: int):
        super().__init__()
        self.conv1 = nn.Conv1d(num_mel_bins, d_model, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d_model, d_model, kernel_size=3, stride=FRAMES_PER_POSITION, padding=1)
        self.positions = nn.Parameter(torch.zeros(positions, d_model))  # (S, D)

    @property
    def frames(self) -> int:
        """The feature frames of one window."""
        return self.positions.shape[0] * FRAMES_PER_POSITION

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        if tuple(features.shape[1:]) != (self.conv1.in_channels, self.frames):
            raise ValueError(f"audio features of shape {tuple(features.shape[1:])}; the model takes "
                             f"({self.conv1.in_channels}, {self.frames})")
        x = F.gelu(self.conv1(features.to(self.conv1.weight.dtype)))  # (B, D, F)
        x = F.gelu(self.conv2(x))  # (B, D, S)
        return x.transpose(1, 2) + self.positions  # (B, S, D)
