"""Audio files built in memory for the decoding, server and real-server tests: a sine in every format soundfile
writes, and hostile files (a header that declares hours, a truncated file, a zip renamed .wav, zero channels)."""

import io
import struct
import zipfile

import numpy
import soundfile

# suffix → soundfile's (format, subtype)
WRITTEN = {".wav": ("WAV", "PCM_16"), ".flac": ("FLAC", "PCM_16"), ".ogg": ("OGG", "VORBIS"),
           ".opus": ("OGG", "OPUS"), ".mp3": ("MP3", "MPEG_LAYER_III")}


def sine(seconds: float, rate: int, hz: float = 440.0, amplitude: float = 0.5) -> numpy.ndarray:
    return (amplitude * numpy.sin(2 * numpy.pi * hz * numpy.arange(int(seconds * rate)) / rate)).astype(numpy.float32)


def audio_bytes(samples: numpy.ndarray, rate: int, suffix: str = ".wav") -> bytes:
    out = io.BytesIO()
    soundfile.write(out, samples, rate, format=WRITTEN[suffix][0], subtype=WRITTEN[suffix][1])
    return out.getvalue()


def wav_with(data: bytes, chunk: bytes, offset: int, value: int, size: str = "<I") -> bytes:
    """A WAV whose field `offset` bytes from the start of chunk `chunk` (b"fmt ", b"data") holds `value`."""
    out = bytearray(data)
    at = out.find(chunk) + offset
    out[at:at + struct.calcsize(size)] = struct.pack(size, value)
    return bytes(out)


def declaring_hours(hours: float = 2.0) -> bytes:
    """A 1-s 16 kHz 16-bit WAV whose data chunk declares `hours` of samples."""
    return wav_with(audio_bytes(sine(1.0, 16_000), 16_000), b"data", 4, int(hours * 3600 * 16_000 * 2))


def truncated(suffix: str = ".wav") -> bytes:
    data = audio_bytes(sine(2.0, 16_000), 16_000, suffix)
    return data[:len(data) // 2]


def zip_renamed() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("speech.txt", "forty-two " * 100)
    return out.getvalue()


def zero_channels() -> bytes:
    return wav_with(audio_bytes(sine(1.0, 16_000), 16_000), b"fmt ", 10, 0, "<H")


def zero_rate() -> bytes:
    return wav_with(audio_bytes(sine(1.0, 16_000), 16_000), b"fmt ", 12, 0)
