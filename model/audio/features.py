"""Whisper's log-mel features in torch, as transformers' WhisperFeatureExtractor computes them (its torch path):
a 400-sample Hann STFT every 160 samples (10 ms at 16 kHz), power spectrum, Slaney mel filters up to 8 kHz,
log10 clamped 8 below the maximum, scaled to about [-1, 1].

Dimensions: N samples, M mel bins, F frames (N / 160), K frequency bins (201).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import torch

from .decode import SAMPLE_RATE

N_FFT = 400
HOP = 160  # samples per feature frame
WINDOW_FRAMES = 3000  # Whisper's 30-s window; a checkpoint with fewer encoder positions has a shorter one


def _hertz_to_mel(freq: np.ndarray) -> np.ndarray:
    """The Slaney scale: linear below 1 kHz, logarithmic above."""
    mels = 3.0 * freq / 200.0
    log_region = freq >= 1000.0
    mels[log_region] = 15.0 + np.log(freq[log_region] / 1000.0) * (27.0 / np.log(6.4))
    return mels


def _mel_to_hertz(mels: np.ndarray) -> np.ndarray:
    freq = 200.0 * mels / 3.0
    log_region = mels >= 15.0
    freq[log_region] = 1000.0 * np.exp(np.log(6.4) / 27.0 * (mels[log_region] - 15.0))
    return freq


@lru_cache(maxsize=4)
def mel_filters(num_mels: int) -> torch.Tensor:
    """Slaney-normalized triangular filters (K, M), computed in float64 as transformers' mel_filter_bank, then
    float32."""
    bins = 1 + N_FFT // 2
    edges = _mel_to_hertz(np.linspace(_hertz_to_mel(np.array([0.0]))[0], _hertz_to_mel(np.array([8000.0]))[0],
                                      num_mels + 2))  # (M + 2,) filter edges in Hz
    fft_freqs = np.linspace(0, SAMPLE_RATE // 2, bins)
    slopes = edges[None, :] - fft_freqs[:, None]  # (K, M + 2)
    widths = np.diff(edges)
    down, up = -slopes[:, :-2] / widths[:-1], slopes[:, 2:] / widths[1:]
    filters = np.maximum(np.zeros(1), np.minimum(down, up))  # (K, M)
    filters *= 2.0 / (edges[2:num_mels + 2] - edges[:num_mels])[None, :]
    return torch.from_numpy(filters).to(torch.float32)


def log_mel(samples: np.ndarray | torch.Tensor, num_mels: int = 80) -> torch.Tensor:
    """16 kHz mono samples (N,) → log-mel features (M, N // 160), float32, normalized over the whole input; a
    batch of inputs (B, N) → (B, M, N // 160), each normalized over itself."""
    waveform = torch.as_tensor(samples).to(torch.float32)
    stft = torch.stft(waveform, N_FFT, HOP, window=torch.hann_window(N_FFT), return_complex=True)  # (…, K, F + 1)
    power = (stft[..., :-1].abs() ** 2).contiguous()  # (…, K, F)
    log_spec = torch.clamp(mel_filters(num_mels).T @ power, min=1e-10).log10()  # (…, M, F)
    log_spec = torch.maximum(log_spec, log_spec.amax(dim=(-2, -1), keepdim=True) - 8.0)
    return (log_spec + 4.0) / 4.0


def padded_features(samples: np.ndarray | torch.Tensor, num_mels: int = 80,
                    window_frames: int = WINDOW_FRAMES) -> torch.Tensor:
    """The features of a whole audio as transformers' extractor gives them to Whisper's generate: audio up to
    one window (30 s: 3000 frames) padded with silence to it; longer audio as it is ("longest" padding,
    long-form)."""
    samples = np.asarray(samples, dtype=np.float32)
    window_samples = window_frames * HOP
    if len(samples) < window_samples:
        samples = np.pad(samples, (0, window_samples - len(samples)))
    return log_mel(samples, num_mels)
