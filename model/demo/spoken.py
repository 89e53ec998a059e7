"""Spoken numbers for the speech demo: Debian's espeak-ng says English number words (the text demo's source side)
in many voices, speeds and pitches; each clip 16 kHz mono, trimmed to where the voice is.

    clips = say_all([(42, voice) for voice in training_voices()])   # [(n, voice, samples)], in parallel

A voice is espeak-ng's accent, variant, speed (words per minute) and pitch (0-99). The held-out voices are variants
no training clip uses, so the demo's word error rate is measured on voices it never heard as well as on numbers
it never saw.
"""

from __future__ import annotations

import random
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import soxr
from num2words import num2words

from ..audio.decode import SAMPLE_RATE
from .data import MAGNITUDES

ESPEAK_RATE = 22050  # espeak-ng's output rate
ACCENTS = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-029")
# espeak-ng's variants (files in espeak-ng-data/voices/!v, names exact: an unknown one falls back to the default
# voice without a word), all but the held-out ones, "Mr serious" (a space in its name) and "fast" (a speed only)
VARIANTS = ("", "Alex", "Alicia", "Andrea", "Andy", "Annie", "AnxiousAndy", "Demonic", "Denis", "Diogo", "Gene",
            "Gene2", "Henrique", "Hugo", "Jacky", "Marco", "Mario", "Michael", "Mike", "Nguyen", "RicishayMax",
            "RicishayMax2", "RicishayMax3", "Storm", "Tweaky", "UniRobot", "adam", "anika", "anikaRobot", "announcer",
            "antonio", "aunty", "belinda", "benjamin", "boris", "caleb", "croak", "david", "ed", "edward", "edward2",
            "f1", "f2", "f3", "f4", "grandma", "grandpa", "gustave", "iven", "iven2", "iven3", "iven4", "john",
            "kaukovalta", "klatt", "klatt2", "klatt3", "klatt4", "klatt5", "klatt6", "linda", "m1", "m2", "m3", "m4",
            "m5", "m6", "m7", "marcelo", "max", "michel", "miguel", "norbert", "pablo", "paul", "pedro", "quincy",
            "rob", "robosoft", "robosoft2", "robosoft3", "robosoft4", "robosoft5", "robosoft6", "robosoft7",
            "robosoft8", "sandro", "steph", "steph2", "steph3", "victor", "whisper", "whisperf", "zac")
HELD_OUT_VARIANTS = ("m8", "f5", "Lee", "shelby", "travis", "robert")
SILENCE = 1e-3  # a 10-ms frame quieter than this (RMS, full scale 1) is not the voice


@dataclass(frozen=True)
class Voice:
    accent: str
    variant: str
    speed: int  # words per minute
    pitch: int

    @property
    def espeak_name(self) -> str:
        return f"{self.accent}+{self.variant}" if self.variant else self.accent


def spoken_text(n: int) -> str:
    """The words a clip says, as the text demo's English source writes them: 'forty-two thousand, one'."""
    return num2words(n, lang="en")


def random_voice(rng: random.Random, variants: tuple[str, ...] = VARIANTS) -> Voice:
    return Voice(rng.choice(ACCENTS), rng.choice(variants), rng.randint(140, 210), rng.randint(20, 80))


def say(text: str, voice: Voice) -> np.ndarray:
    """espeak-ng's speech of `text`: (N,) float32 at 16 kHz, the silences before and after the voice cut off."""
    if shutil.which("espeak-ng") is None:
        raise RuntimeError("espeak-ng is not installed (Debian: apt-get install espeak-ng)")
    wav = subprocess.run(["espeak-ng", "-v", voice.espeak_name, "-s", str(voice.speed), "-p", str(voice.pitch),
                          "--stdout", text], check=True, capture_output=True).stdout
    # a RIFF header of 44 bytes, then 16-bit PCM (the header's sizes are unset when written to a pipe)
    pcm = np.frombuffer(wav[44:len(wav) - len(wav) % 2], dtype="<i2").astype(np.float32) / 32768
    samples = soxr.resample(pcm, ESPEAK_RATE, SAMPLE_RATE).astype(np.float32)
    return trimmed(samples)


def trimmed(samples: np.ndarray) -> np.ndarray:
    """From the first to the last 10-ms frame louder than SILENCE."""
    frame = SAMPLE_RATE // 100
    usable = len(samples) // frame * frame
    rms = np.sqrt((samples[:usable].reshape(-1, frame) ** 2).mean(1))  # (frames,)
    loud = np.flatnonzero(rms > SILENCE)
    if not len(loud):
        return samples[:0]
    return samples[loud[0] * frame:(loud[-1] + 1) * frame]


def say_all(requests: list[tuple[int, Voice]], workers: int = 2) -> list[tuple[int, Voice, np.ndarray]]:
    """Each (number, voice) spoken, in order; espeak-ng processes run `workers` at a time."""
    with ThreadPoolExecutor(workers) as pool:
        spoken = pool.map(lambda request: say(spoken_text(request[0]), request[1]), requests)
        return [(n, voice, samples) for (n, voice), samples in zip(requests, spoken)]


def training_requests(count: int, exclude: set[int], seed: int = 0) -> list[tuple[int, Voice]]:
    """`count` numbers (the text demo's mix of magnitudes, none of `exclude`), each in a random training voice."""
    rng = random.Random(seed)
    requests = []
    while len(requests) < count:
        low, high, _ = rng.choices(MAGNITUDES, weights=[m[2] for m in MAGNITUDES])[0]
        n = rng.randint(low, high)
        if n not in exclude:
            requests.append((n, random_voice(rng)))
    return requests
