"""A speech model's stand-in for the API tests in process: the demo translation model served as usual beside a
speech model whose transcript is scripted (the real one's windows are tested against model.Transcriber)."""

from __future__ import annotations

from model import Segment, Transcript, Word

from server.front import ModelRegistry
from server.front.registry import DEMO_MODEL_NAME, ModelEntry
from server.runtime.local import LocalModels, load_service

SPEECH_MODEL = "tiny-speech"
TRANSCRIPT = Transcript(language="en", duration=4.0, text=" forty-two seven", segments=(
    Segment(start=0.0, end=1.52, text=" forty-two", token_ids=(1, 2), avg_logprob=-0.25, no_speech_prob=0.125,
            words=(Word(0.0, 0.62, " forty", 0.75), Word(0.62, 1.5, "-two", 0.5))),
    Segment(start=1.52, end=3.004, text=" seven", token_ids=(3,), avg_logprob=-0.5)))


class ScriptedSpeech:
    """A ServedModel that answers every speech job with TRANSCRIPT, its segments first, and keeps the jobs."""

    name = SPEECH_MODEL

    def __init__(self):
        self.jobs = []

    async def transcribe_events(self, job):
        self.jobs.append(job)
        for segment in TRANSCRIPT.segments:
            yield segment
        yield TRANSCRIPT

    def close(self):
        pass


class WithSpeech(LocalModels):
    """LocalModels over the demo model and the scripted speech model."""

    def __init__(self, settings):
        demo = ModelRegistry.from_paths(None).entries[DEMO_MODEL_NAME]
        speech = ModelEntry(SPEECH_MODEL, "", "speech", ("en", "fr"), ("en", "fr"), 1, 448, speech=True)
        self.registry, self.settings = ModelRegistry([demo, speech]), settings
        self.speech = ScriptedSpeech()
        self.services = {DEMO_MODEL_NAME: load_service(demo, settings), SPEECH_MODEL: self.speech}
