"""The scheduler's contract with fabricated engine results — no model, no torch: FCFS admission within rows and
the padded-token budget, all-or-none queueing, cancellation while waiting and while running, and what a step's
events mean (first step, tokens, finishing); a document's share of the rows while others decode. Then the engine
loop with a fake engine: a delivery that fails cancels only its own request."""

import threading
import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from server.errors import QueueFull
from server.engine.sequence import ErrorOutput, FinalOutput, Sequence, Status, TokenOutput
from server.engine.scheduler import Scheduler


@dataclass
class Event:  # the shape of model.StepEvent
    key: int
    new_token: int | None
    results: list | None = None
    error: Exception | None = None


def request(tokens: int, beams: int = 1, deliver=lambda output: None) -> Sequence:
    return Sequence(list(range(tokens)), SimpleNamespace(num_beams=beams, rows=beams), deliver)


def sentences_of_one_request(n: int) -> list[Sequence]:
    """A document's sentences: one scheduler group."""
    document = [request(3) for _ in range(n)]
    for sentence in document[1:]:
        sentence.request_id = document[0].request_id
    return document


def hypothesis(n: int):
    return SimpleNamespace(token_ids=list(range(n)))


def test_admits_first_come_first_served_within_rows_and_never_skips_ahead():
    scheduler = Scheduler(max_rows=4, max_batch_tokens=1000, max_waiting=10)
    a, b, c, d = request(3, beams=2), request(3, beams=1), request(3, beams=2), request(3, beams=1)
    scheduler.add([a, b, c, d])
    plan = scheduler.schedule()
    assert plan.admit == [a, b]  # c needs 2 rows, 1 is free: d (which would fit) must wait behind it
    assert [r.status for r in (a, b, c, d)] == [Status.RUNNING, Status.RUNNING, Status.WAITING, Status.WAITING]
    assert scheduler.rows_in_use == 3 and list(scheduler.waiting) == [c, d]


def test_demand_is_the_rows_running_sequences_hold_and_waiting_ones_ask_for():
    """What a replica reports to the autoscaler (runtime.rows_policy): a beam-4 sequence counts 4 rows, running or
    waiting."""
    s = Scheduler(max_rows=6, max_batch_tokens=1000, max_waiting=10)
    s.add([request(3, beams=4), request(3), request(3, beams=4), request(3)])
    assert s.demand_rows == 10
    s.schedule()  # 4 + 1 rows admitted; the second beam-4 sequence waits (next in line: nothing skips ahead)
    assert (s.rows_in_use, s.demand_rows) == (5, 10)


def test_padded_token_budget_bounds_one_encoder_pass():
    scheduler = Scheduler(max_rows=64, max_batch_tokens=30, max_waiting=10)
    short, long_, other = request(5), request(12), request(4)
    scheduler.add([short, long_, other])
    assert scheduler.schedule().admit == [short, long_]  # 2 × 12 = 24 ≤ 30; a third would pad to 36
    assert scheduler.schedule().admit == [other]
    huge = request(100)  # alone, a request over the budget is still admitted (limits are checked earlier)
    scheduler.add([huge])
    assert scheduler.schedule().admit == [huge]


def test_queueing_is_all_or_none():
    scheduler = Scheduler(max_rows=4, max_batch_tokens=100, max_waiting=3)
    scheduler.add([request(2), request(2)])
    with pytest.raises(QueueFull) as info:
        scheduler.add([request(2), request(2)])
    assert info.value.limit == 3 and info.value.retry_after_s == 1
    assert len(scheduler.waiting) == 2


def test_cancel_while_waiting_and_while_running():
    scheduler = Scheduler(max_rows=2, max_batch_tokens=100, max_waiting=10)
    running, waiting = request(2, beams=2), request(2)
    scheduler.add([running, waiting])
    scheduler.schedule()
    scheduler.cancel(waiting)
    assert waiting.status == Status.CANCELLED and not scheduler.waiting
    scheduler.cancel(running)
    scheduler.cancel(running)  # twice is once
    assert running.status == Status.RUNNING  # the engine still holds its rows until the next plan
    plan = scheduler.schedule()
    assert plan.cancel == [running] and running.status == Status.CANCELLED and scheduler.rows_in_use == 0
    assert not scheduler.has_work()


def test_left_waiting_is_told_of_every_sequence_that_leaves_the_queue_and_of_no_other():
    """The hook an engine in a process of its own gives places back through: admissions and cancellations while
    waiting, each once; a running sequence's cancellation is not a place in the queue."""
    left = []
    scheduler = Scheduler(max_rows=2, max_batch_tokens=100, max_waiting=None, left_waiting=left.append)
    a, b, c, d = request(2), request(2), request(2), request(2)
    scheduler.add([a, b, c, d])
    scheduler.schedule()
    assert left == [2]  # a and b admitted
    scheduler.cancel(c)
    scheduler.cancel(c)  # twice is once
    assert left == [2, 1]
    scheduler.cancel(a)
    scheduler.schedule()  # a leaves the batch, d takes its row
    assert left == [2, 1, 1] and d.status == Status.RUNNING and not scheduler.waiting


def test_update_turns_events_into_outputs_and_retires_finished_requests():
    scheduler = Scheduler(max_rows=8, max_batch_tokens=100, max_waiting=10)
    greedy, beam = request(3), request(3, beams=3)
    scheduler.add([greedy, beam])
    scheduler.schedule()
    first = scheduler.update([Event(greedy.id, 7), Event(beam.id, None)], now=10.0)
    assert first.first_step == [greedy, beam] and greedy.first_token_at == beam.first_token_at == 10.0
    assert first.outputs == [(greedy, TokenOutput(7))] and not first.finished
    best = [hypothesis(4), hypothesis(2)]
    second = scheduler.update([Event(greedy.id, 8), Event(beam.id, None, best)], now=11.0)
    assert second.first_step == [] and greedy.first_token_at == 10.0
    assert second.outputs == [(greedy, TokenOutput(8)), (beam, FinalOutput(best))]
    assert second.finished == [beam] and beam.status == Status.FINISHED and beam.id not in scheduler.running
    assert beam.steps == 2 and beam.output_tokens == 4  # tokens of the best hypothesis, not steps
    assert scheduler.rows_in_use == 1


def test_a_sequence_whose_step_failed_fails_alone_with_a_500():
    scheduler = Scheduler(max_rows=8, max_batch_tokens=100, max_waiting=10)
    bad, good = request(3), request(3)
    scheduler.add([bad, good])
    scheduler.schedule()
    update = scheduler.update([Event(bad.id, None, error=ValueError("nan in the scores")), Event(good.id, 5)], now=1.0)
    (failed, output), going_on = update.outputs
    assert failed is bad and isinstance(output, ErrorOutput) and output.error.status == 500
    assert "nan in the scores" in output.error.message
    assert going_on == (good, TokenOutput(5)) and bad.status == Status.FAILED and good.status == Status.RUNNING
    assert list(scheduler.running) == [good.id] and scheduler.rows_in_use == 1


def test_events_of_a_request_cancelled_during_the_step_are_dropped():
    scheduler = Scheduler(max_rows=8, max_batch_tokens=100, max_waiting=10)
    r = request(3)
    scheduler.add([r])
    scheduler.schedule()
    scheduler.cancel(r)
    scheduler.schedule()  # the cancel plan: r left the batch
    assert scheduler.update([Event(r.id, 5)], now=1.0).outputs == []


class FakeEngine:
    """Every admitted request gets one token per step and finishes after `length` steps."""

    def __init__(self, length: int = 3):
        self.length, self.live = length, {}

    @property
    def rows_in_use(self) -> int:
        return sum(r.rows for r in self.live.values())

    def reset(self) -> None:
        self.live = {}

    def close(self) -> None:
        pass

    def execute(self, plan):
        for r in plan.cancel:
            self.live.pop(r.id, None)
        for r in plan.admit:
            self.live[r.id] = r
        events = []
        for key, r in list(self.live.items()):
            done = r.steps + 1 >= self.length
            events.append(Event(key, 1, [hypothesis(self.length)] if done else None))
            if done:
                del self.live[key]
        return events


def test_a_failing_delivery_cancels_only_its_own_request():
    from server.engine.loop import EngineLoop
    from server.metrics import EngineStats

    engine = FakeEngine(length=50)
    loop = EngineLoop(engine, Scheduler(max_rows=4, max_batch_tokens=100, max_waiting=10),
                      EngineStats("fake")).start()
    got, finished = [], threading.Event()

    def broken(output):
        raise RuntimeError("Event loop is closed")

    def healthy(output):
        got.append(output)
        if isinstance(output, FinalOutput):
            finished.set()

    try:
        bad, good = request(3, deliver=broken), request(3, deliver=healthy)
        with loop.lock:
            loop.scheduler.add([bad, good])
            loop.lock.notify()
        assert finished.wait(10), "the healthy request never finished"
        deadline = time.monotonic() + 5
        while engine.rows_in_use and time.monotonic() < deadline:
            time.sleep(0.01)
        assert loop.alive and bad.status == Status.CANCELLED and engine.rows_in_use == 0
        assert sum(isinstance(o, TokenOutput) for o in got) == 50
    finally:
        loop.stop()


def test_a_short_request_takes_the_first_row_a_long_document_frees():
    scheduler = Scheduler(max_rows=4, max_batch_tokens=1000, max_waiting=100)
    document = sentences_of_one_request(20)
    scheduler.add(document)
    assert scheduler.schedule().admit == document[:4]  # alone, the document takes every row
    interactive = request(3)
    scheduler.add([interactive])
    assert scheduler.schedule().admit == []  # no row free yet
    scheduler.update([Event(document[0].id, None, [hypothesis(2)])], now=1.0)  # one sentence finishes
    assert scheduler.schedule().admit == [interactive]  # ahead of the document's 16 waiting sentences
    scheduler.update([Event(document[1].id, None, [hypothesis(2)])], now=2.0)
    assert scheduler.schedule().admit == [document[4]]  # then the document goes on, in its own order


def test_a_document_grows_only_to_its_share_while_others_decode():
    scheduler = Scheduler(max_rows=8, max_batch_tokens=1000, max_waiting=100, max_request_share=0.5)
    document = sentences_of_one_request(20)
    scheduler.add(document)
    assert scheduler.schedule().admit == document[:8]  # alone, the document takes every row
    interactive = request(3)
    scheduler.add([interactive])
    finished = [Event(s.id, None, [hypothesis(2)]) for s in document[:3]]  # three rows free
    scheduler.update(finished, now=1.0)
    assert scheduler.schedule().admit == [interactive]  # the document holds 5 > 4: its share while others decode
    scheduler.update([Event(s.id, None, [hypothesis(2)]) for s in document[3:4]], now=2.0)
    assert scheduler.schedule().admit == []  # 4 rows: at its share, though 3 rows are free
    wide = request(3, beams=6)  # a new request's first sequence is never held back by a share
    scheduler.add([wide])
    scheduler.update([Event(interactive.id, None, [hypothesis(2)])], now=3.0)
    assert scheduler.schedule().admit == []  # 4 rows free, the beam request needs 6: it waits, and nothing skips it
    scheduler.update([Event(s.id, None, [hypothesis(2)]) for s in document[4:6]], now=4.0)
    assert scheduler.schedule().admit == [wide]
    scheduler.update([Event(wide.id, None, [hypothesis(2)])], now=5.0)
    assert scheduler.schedule().admit == document[8:14]  # alone again: every free row


@pytest.mark.parametrize("share", ["0", "1.5"])
def test_a_share_outside_zero_to_one_is_a_usage_error_naming_it(share, capsys):
    from server.__main__ import parse_args

    with pytest.raises(SystemExit) as info:
        parse_args(["--max-request-share", share])
    assert info.value.code == 2 and "max_request_share" in capsys.readouterr().err
    assert parse_args(["--max-request-share", "0.25"])[1].max_request_share == 0.25
