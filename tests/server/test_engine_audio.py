"""Audio windows through the server's engine: each window one Sequence carrying its features, windows of several
audios sharing the continuous batch, each audio's transcript the Transcriber's (model.speech) token for token."""

import pytest
from whisper_fixtures import build_whisper, speech

from model import SpeechOptions, SpeechWindows, Transcriber
from server.engine.engine import Engine
from server.engine.scheduler import Scheduler
from server.engine.sequence import FinalOutput, Sequence

pytestmark = pytest.mark.slow


def test_windows_of_several_audios_share_the_engines_batch(tmp_path):
    transcriber = Transcriber.from_pretrained(str(build_whisper(tmp_path / "tiny")))
    bundle = transcriber.bundle
    options = SpeechOptions(max_new_tokens=12)
    audios = [speech(seconds, seed=seconds) for seconds in (8, 41, 12)]
    walks = [SpeechWindows(bundle, samples, options) for samples in audios]
    engine = Engine(bundle.network, max_rows=8, max_input_tokens=64,
                    max_new_tokens=bundle.tokenizer.speech.max_target_positions - 1)
    scheduler = Scheduler(max_rows=8, max_batch_tokens=4096, max_waiting=16)
    owner, most_running = {}, 0

    def submit(walk: SpeechWindows) -> None:
        source = walk.next_source()
        if source is not None:
            sequence = Sequence(source.ids, walk.decode_params(), lambda output: None, features=source.features)
            owner[sequence.id] = walk
            scheduler.add([sequence])

    for walk in walks:
        submit(walk)
    while scheduler.has_work():
        update = scheduler.update(engine.execute(scheduler.schedule()), 0.0)
        most_running = max(most_running, len(scheduler.running))
        for sequence, output in update.outputs:
            if isinstance(output, FinalOutput):
                walk = owner.pop(sequence.id)
                walk.take(output.hypotheses[0])
                submit(walk)
    engine.close()
    assert most_running > 1  # windows of different audios decoded side by side
    for walk, samples in zip(walks, audios):
        assert walk.transcript() == transcriber.transcribe(samples, options)
