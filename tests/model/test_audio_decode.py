"""model.read_audio: every format soundfile writes, resampled to 16 kHz against the sine it holds, and each hostile
file its typed error."""

import io

import numpy
import pytest
import soundfile

from audio_files import (WRITTEN, audio_bytes, declaring_hours, sine, truncated, wav_with, zero_channels, zero_rate,
                         zip_renamed)
from model import SAMPLE_RATE, AudioTooLarge, AudioTooLong, BadAudio, read_audio
from model.audio import decode

LIMITS = dict(max_bytes=10_000_000, max_seconds=60)
# How far each format's decoded 16 kHz sine may stray from the true one (away from the edges): 16-bit rounding for
# the lossless ones, the codec's loss for the others.
TOLERANCE = {".wav": 1e-3, ".flac": 1e-3, ".ogg": 0.05, ".opus": 0.05, ".mp3": 0.05}


def true_sine(count: int, hz: float = 440.0) -> numpy.ndarray:
    return 0.5 * numpy.sin(2 * numpy.pi * hz * numpy.arange(count) / SAMPLE_RATE)


def middle(samples: numpy.ndarray) -> numpy.ndarray:
    return samples[len(samples) // 4: 3 * len(samples) // 4]  # codecs and resamplers ramp at the edges


@pytest.mark.parametrize("suffix", sorted(WRITTEN))
def test_every_format_decodes_to_the_16_khz_sine(suffix):
    rate = 48_000 if suffix == ".opus" else 44_100  # Opus encodes at 48 kHz only
    samples = read_audio(audio_bytes(sine(2.0, rate), rate, suffix), **LIMITS)
    assert samples.dtype == numpy.float32 and samples.ndim == 1
    assert abs(len(samples) - 2 * SAMPLE_RATE) <= 2
    if suffix in (".ogg", ".opus", ".mp3"):  # codecs may shift the signal by their delay: compare by correlation
        lags = range(-400, 401)
        reference = true_sine(len(samples) + 800)
        best = max(lags, key=lambda lag: numpy.dot(middle(samples), middle(reference[400 + lag: 400 + lag
                                                                                     + len(samples)])))
        reference = reference[400 + best: 400 + best + len(samples)]
    else:
        reference = true_sine(len(samples))
    assert numpy.abs(middle(samples) - middle(reference)).max() < TOLERANCE[suffix]


@pytest.mark.parametrize("rate", [8_000, 16_000, 22_050, 44_100, 48_000])
def test_resampled_to_16_khz(rate):
    samples = read_audio(audio_bytes(sine(1.5, rate, hz=1000.0), rate, ".flac"), **LIMITS)
    assert abs(len(samples) - int(1.5 * SAMPLE_RATE)) <= 1
    assert numpy.abs(middle(samples) - middle(true_sine(len(samples), hz=1000.0))).max() < 1e-3


def test_channels_are_mixed_to_mono():
    left, right = sine(1.0, 16_000), -sine(1.0, 16_000) * 0.5
    samples = read_audio(audio_bytes(numpy.stack([left, right], axis=1), 16_000, ".wav"), **LIMITS)
    assert numpy.abs(samples - (left + right) / 2).max() < 1e-3


@pytest.mark.parametrize("data, error, words", [
    (b"", BadAudio, "empty"),
    (zip_renamed(), BadAudio, "Format not recognised"),
    (b"RIFF\x00\x00\x00\x00WAVEfmt ", BadAudio, "not audio this server reads"),
    (zero_channels(), BadAudio, "Channel count is zero"),
    (zero_rate(), BadAudio, "not audio this server reads"),
    (truncated(".wav"), BadAudio, "truncated: the header declares 32000 frames, the file holds 15989"),
    (truncated(".mp3"), BadAudio, "truncated"),
    (truncated(".flac"), BadAudio, "damaged"),
    (truncated(".ogg"), BadAudio, "damaged"),
    (declaring_hours(2.0), AudioTooLong, "7200.0 s long; at most 60 s"),
    (wav_with(audio_bytes(sine(0.1, 16_000), 16_000), b"fmt ", 12, 1), BadAudio, "sample rate of 1 Hz"),
    (audio_bytes(numpy.zeros(0, numpy.float32), 16_000), BadAudio, "no samples"),
], ids=["empty", "zip", "no data chunk", "zero channels", "zero rate", "truncated wav", "truncated mp3",
        "truncated flac", "truncated ogg", "declares hours", "1 Hz", "no samples"])
def test_hostile_files_are_typed_errors(data, error, words):
    with pytest.raises(error) as raised:
        read_audio(data, **LIMITS)
    assert words in str(raised.value)


def test_the_byte_limit_holds_before_anything_is_parsed():
    with pytest.raises(AudioTooLarge, match="the audio file has 1001 bytes; at most 1000"):
        read_audio(b"\x00" * 1001, max_bytes=1000, max_seconds=60)


@pytest.mark.parametrize("declared", [0xFFFFFFFF, 0x7FFFF000, 0x7FFFFFFF], ids=["ffmpeg", "espeak-ng", "int32 max"])
def test_a_stream_s_wav_declaring_no_length_is_read(declared):
    """A WAV written to a pipe declares no length (each writer's placeholder): not a lie, read as far as it goes."""
    streamed = wav_with(audio_bytes(sine(3.0, 16_000), 16_000), b"data", 4, declared)
    assert len(read_audio(streamed, max_bytes=10**7, max_seconds=5)) == 3 * SAMPLE_RATE
    with pytest.raises(AudioTooLong, match="3.0 s long; at most 2 s"):
        read_audio(streamed, max_bytes=10**7, max_seconds=2)


def test_the_duration_limit_holds_on_what_is_decoded(monkeypatch):
    """A header that declares less than the file holds: decoding stops once past the limit."""
    monkeypatch.setattr(decode, "declared_frames", lambda f: 0)
    with pytest.raises(AudioTooLong, match="at least 3.0 s long; at most 2 s"):
        read_audio(audio_bytes(sine(3.0, 48_000), 48_000, ".flac"), max_bytes=10**7, max_seconds=2)


def test_non_finite_samples_are_refused():
    samples = sine(0.5, 16_000)
    samples[100] = numpy.inf
    with pytest.raises(BadAudio, match="not finite"):
        read_audio(float_wav(samples), **LIMITS)


def float_wav(samples: numpy.ndarray) -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, 16_000, format="WAV", subtype="FLOAT")
    return out.getvalue()
