"""Audio file bytes → 16 kHz mono float32 samples, what a speech model reads.

    samples = read_audio(data, max_bytes=25_000_000, max_seconds=600)

Decoded by libsndfile (soundfile's wheel bundles it with FLAC, Ogg Vorbis, Opus and MP3: no ffmpeg), resampled by
libsoxr (the soxr wheel, its high-quality setting). Every limit holds before the work it bounds: the bytes before
anything is parsed; the duration the header declares before any sample is decoded; the duration actually decoded
block by block (a header may lie), so memory never exceeds the limit's worth of 16 kHz samples, whatever the
file's rate or channel count. A file that is not one of AUDIO_FORMATS, is damaged, or holds fewer samples than its
header declares is a BadAudio; one too long an AudioTooLong; too many bytes an AudioTooLarge.
"""

from __future__ import annotations

import io
import re

import numpy
import soundfile
import soxr

from ..errors import AudioTooLarge, AudioTooLong, BadAudio

SAMPLE_RATE = 16_000
# libsndfile's containers this package reads (it parses more; these are the ones speech arrives in)
AUDIO_FORMATS = ("WAV", "WAVEX", "RF64", "W64", "AIFF", "FLAC", "OGG", "MP3")
# the file names they come under: what marks an upload as audio where a file's kind goes by its name (document jobs);
# the decoding itself reads the content, whatever the name says
AUDIO_SUFFIXES = (".wav", ".flac", ".ogg", ".opus", ".mp3", ".aiff", ".aif")
RATES = (1_000, 768_000)  # sample rates read, Hz: outside, a header is more likely hostile than real
BLOCK_SAMPLES = 1 << 20  # samples (frames × channels) decoded at a time: the memory a many-channel file can take
# What a header may declare beyond what decodes, as a share of its frames: encoders that write no exact length
# (an MP3 without a Xing header) let libsndfile estimate it from the bit rate.
SLACK = 0.01
# libsndfile's log when a WAV's data chunk declares more bytes than the file holds (it then reads what is there)
_DATA_CHUNK = re.compile(r"^data\s*:\s*(\d+)\s*\(should be (\d+)\)", re.MULTILINE)
# What a WAV written to a pipe declares, its writer unable to seek back: no length, not a lie. 0xFFFFFFFF and 0
# (ffmpeg and most), 0x7FFFF000 (espeak-ng: the largest 4 KiB-aligned signed size), 0x7FFFFFFF.
_UNKNOWN_LENGTHS = (0, 0xFFFFFFFF, 0x7FFFF000, 0x7FFFFFFF)


def read_audio(data: bytes, max_bytes: int, max_seconds: float) -> numpy.ndarray:
    """The file's samples, mixed to mono and resampled to SAMPLE_RATE: shape (N,), float32, in [-1, 1]."""
    if len(data) > max_bytes:
        raise AudioTooLarge(len(data), max_bytes)
    if not data:
        raise BadAudio("the file is empty")
    try:
        with soundfile.SoundFile(io.BytesIO(data)) as f:
            _check_header(f, max_seconds)
            return _decoded(f, max_seconds)
    except soundfile.LibsndfileError as e:
        raise BadAudio(f"not audio this server reads ({', '.join(AUDIO_FORMATS)}), or damaged: "
                       f"{e.error_string}") from None
    except soundfile.SoundFileError as e:  # soundfile's own checks of what libsndfile reported
        raise BadAudio(f"damaged audio: {e}") from None


def declared_frames(f: soundfile.SoundFile) -> int:
    """The frames the header declares: libsndfile's count, unless it cut a WAV's data chunk to the file's length
    (its log then says what the chunk declared)."""
    found = _DATA_CHUNK.search(f.extra_info)
    if not found or int(found[1]) in _UNKNOWN_LENGTHS or not int(found[2]):
        return f.frames
    declared, held = int(found[1]), int(found[2])
    return f.frames * declared // held


def _check_header(f: soundfile.SoundFile, max_seconds: float) -> None:
    if f.format not in AUDIO_FORMATS:
        raise BadAudio(f"{f.format} audio is not read here; formats: {', '.join(AUDIO_FORMATS)}")
    if f.channels < 1:
        raise BadAudio(f"the header declares {f.channels} channels")
    if not RATES[0] <= f.samplerate <= RATES[1]:
        raise BadAudio(f"the header declares a sample rate of {f.samplerate} Hz; read: {RATES[0]}..{RATES[1]} Hz")
    seconds = declared_frames(f) / f.samplerate
    if seconds > max_seconds:
        raise AudioTooLong(seconds, max_seconds)


def _decoded(f: soundfile.SoundFile, max_seconds: float) -> numpy.ndarray:
    """Block by block: each mixed to mono and fed to a streaming resampler, decoding stopped past the limit."""
    limit_frames = int(max_seconds * f.samplerate)
    block = max(1, BLOCK_SAMPLES // f.channels)
    resampler = soxr.ResampleStream(f.samplerate, SAMPLE_RATE, 1, dtype="float32")
    pieces, frames = [], 0
    while True:
        samples = f.read(block, dtype="float32", always_2d=True)  # (frames, channels)
        frames += len(samples)
        if frames > limit_frames:
            raise AudioTooLong(frames / f.samplerate, max_seconds, at_least=True)
        mono = samples.mean(axis=1)  # (frames,)
        if not numpy.isfinite(mono).all():
            raise BadAudio("the file holds samples that are not finite numbers")
        last = len(samples) < block
        pieces.append(resampler.resample_chunk(mono, last=last))
        if last:
            break
    if not frames:
        raise BadAudio("the file holds no samples")
    declared = declared_frames(f)
    if frames < declared * (1 - SLACK):
        raise BadAudio(f"truncated: the header declares {declared} frames, the file holds {frames}")
    return numpy.clip(numpy.concatenate(pieces), -1.0, 1.0)
