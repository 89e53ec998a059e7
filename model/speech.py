"""Speech in: an audio's 30-s windows as engine sources, decoded as transformers' Whisper generate decodes them.

    Transcriber.from_pretrained("openai/whisper-tiny").transcribe(samples)   # 16 kHz mono float32 → Transcript

SpeechWindows walks one audio: each window is one engine Source (its log-mel features) with the DecodeParams of
that window (the decoder prompt <|startofprev|> prompt <|startoftranscript|> language task [<|notimestamps|>],
suppressed tokens, the timestamp rule); whoever decodes (the Transcriber here, a server's engine) hands back the
window's hypothesis, which gives its segments and where the next window starts. Windows of many audios therefore
share one continuous batch. The language, when not given, is detected first from the first window, as transformers
does: a one-step source whose only allowed tokens are the model's languages.

Whisper's own transcribe (SpeechOptions.with_fallback; OpenAI's API at temperature 0), as transformers' long-form
generate has it:
- the temperature fallback: a window whose text compresses too well (a loop) or whose tokens are too unlikely is
  decoded again, sampled at the next temperature, and the last try stands. Sampling draws from the options' seed, so
  an audio's transcript is the same alone or in any batch;
- conditioning on the previous text: after <|startofprev|>, the last tokens of the windows before (and of the
  prompt), but not right after a window decoded at 0.5 or more (transformers'; openai-whisper's: above 0.5);
- no-speech detection: a window whose <|nospeech|> probability is above a threshold and whose tokens are unlikely
  is skipped, no segment made of it.
- word timestamps (word_timestamps): a decoded window's tokens timed by its alignment heads (one more
  decoder pass: model.decoding.token_timing), each segment's words grouped from them (model.speech_words).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from .audio.features import HOP, SAMPLE_RATE, padded_features
from .decoding.batch_decoder import BatchDecoder
from .decoding.search import DecodeParams, Hypothesis
from .decoding.source import Source
from .decoding.speech_rules import NoSpeechProbe, TimestampRules
from .decoding.token_timing import TokenTimes, TokenTiming
from .loading.bundle import ModelBundle, load
from .network.audio_front import FRAMES_PER_POSITION
from .speech_words import SPACELESS, Word, segment_words
from .text.languages import match_language

FRAME_SECONDS = HOP / SAMPLE_RATE  # 0.01
TIMESTAMP_SECONDS = FRAME_SECONDS * FRAMES_PER_POSITION  # 0.02: a timestamp token per encoder position
TASKS = ("transcribe", "translate")
# transformers' prompt_condition_type: the prompt is the previous text's first part (dropped once it no longer fits),
# or it comes before the previous text of every window
PROMPT_CONDITIONS = ("first-segment", "all-segments")
LOW_TEMPERATURE = 0.5  # only a window decoded below it lets the next one read the text so far (transformers')


@dataclass(frozen=True)
class Segment:
    start: float  # seconds from the audio's start
    end: float
    text: str
    token_ids: tuple[int, ...]  # its timestamps included
    avg_logprob: float  # of the window it came from (OpenAI's verbose_json)
    temperature: float = 0.0  # the window's decoding: 0 greedy or beams, else sampled
    no_speech_prob: float = 0.0  # the window's (0 where the checkpoint has no <|nospeech|>)
    seek: int = 0  # the frame (10 ms) the window starts at
    words: tuple[Word, ...] = ()  # with SpeechOptions.word_timestamps (model.speech_words)


@dataclass(frozen=True)
class Transcript:
    language: str
    duration: float  # seconds of audio
    segments: tuple[Segment, ...]
    text: str  # the segments' texts joined


@dataclass(frozen=True)
class SpeechOptions:
    task: str = "transcribe"  # or "translate" (into English); an English-only model only transcribes
    language: str | None = None  # the spoken language; None: detected from the first 30 s
    prompt: str | None = None  # text the decoder reads before each window (<|startofprev|>); see prompt_condition_type
    # each window's decoder also reads the previous windows' text (the last max_target_positions // 2 - 1 tokens)
    condition_on_previous_text: bool = False
    prompt_condition_type: str = "first-segment"  # or "all-segments" (PROMPT_CONDITIONS), with conditioning only
    timestamps: bool = True  # segments from timestamp tokens; always on past 30 s, which needs them to seek
    num_beams: int | None = None  # None: the checkpoint's default
    temperature: float | tuple[float, ...] = 0.0  # > 0 samples (one beam); several: the fallback's, in order
    # a window decoded again at the next temperature when its text's compression ratio is above the one or its
    # tokens' average log-probability below the other (None: not checked)
    compression_ratio_threshold: float | None = None
    logprob_threshold: float | None = None
    # a window whose <|nospeech|> probability is above it, and whose average log-probability is below
    # logprob_threshold (when set), is skipped: silence (None: never)
    no_speech_threshold: float | None = None
    seed: int = 0  # the sampling's: each decoding of a window draws from seed + the decodings before it
    max_new_tokens: int | None = None  # per window; None: what the decoder's positions leave after the prompt
    # each segment's words timed (Segment.words): one more decoder pass per decoded window
    word_timestamps: bool = False

    @classmethod
    def with_fallback(cls, **choices) -> "SpeechOptions":
        """Whisper's own transcribe defaults (openai-whisper's, faster-whisper's): temperatures 0 to 1 by 0.2,
        compression ratio 2.4, average log-probability -1, no-speech probability 0.6. Not conditioned on the previous
        text (theirs is, transformers' is not): the engine reads a decoder prompt a token a step, so the previous
        text would cost a window up to max_target_positions // 2 more steps, and take that room from its tokens."""
        return cls(**{"temperature": (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), "compression_ratio_threshold": 2.4,
                      "logprob_threshold": -1.0, "no_speech_threshold": 0.6, **choices})

    @property
    def temperatures(self) -> tuple[float, ...]:
        return self.temperature if isinstance(self.temperature, tuple) else (self.temperature,)


def compression_ratio(text: str) -> float:
    """Whisper's: the text's UTF-8 bytes over their zlib-compressed bytes (a repeating loop compresses well)."""
    data = text.encode("utf-8")
    return len(data) / len(zlib.compress(data)) if data else 0.0


class SpeechWindows:
    """One audio's windows, stepped by whoever decodes: next_source() and decode_params() for the next step, then
    take(hypothesis) with its best hypothesis, until next_source() is None."""

    def __init__(self, bundle: ModelBundle, samples: np.ndarray, options: SpeechOptions = SpeechOptions()):
        self.bundle, self.options = bundle, options
        self.tokens = tokens = bundle.tokenizer.speech  # model.loading.families.whisper.SpeechTokens
        self.check(options)
        self.language = (None if options.language is None or not tokens.multilingual
                         else match_language(options.language, tuple(tokens.languages), "language"))
        samples = np.asarray(samples, dtype=np.float32)
        if samples.ndim != 1 or not len(samples):
            raise ValueError(f"audio samples of shape {samples.shape}; expected (N,) with N > 0, 16 kHz mono")
        self.duration = len(samples) / SAMPLE_RATE
        self.window_frames = FRAMES_PER_POSITION * bundle.config.max_source_positions  # 3000 (30 s) in openai/whisper's
        self.features = padded_features(samples, bundle.config.num_mel_bins, self.window_frames)  # (M, F)
        self.frames = self.features.shape[-1]
        self.audio_frames = min(-(-len(samples) // HOP), self.frames)  # the extractor's attention mask: no padding
        self.timestamps = options.timestamps or self.frames > self.window_frames  # long-form seeks by timestamps
        prompt = bundle.tokenizer.encode(options.prompt) if options.prompt else []
        self.prompt = ([tokens.previous] + prompt) if prompt else []
        self.seek = 0  # the frame the next window starts at
        self.tries = 0  # of the window at `seek`: its temperature's index
        self.decodings = 0  # of this audio so far (the language's included): the next sampling's seed offset
        self.conditioning = options.condition_on_previous_text  # whether the next window reads the text so far
        self.segments: list[Segment] = []

    def check(self, options: SpeechOptions) -> None:
        """Options the checkpoint can follow, else ValueError naming the option."""
        tokens, model = self.tokens, self.bundle.name
        if options.task not in TASKS:
            raise ValueError(f"task {options.task!r} is not one of {', '.join(TASKS)}")
        if not tokens.multilingual and (options.task != "transcribe" or options.language not in (None, "en")):
            raise ValueError("an English-only model transcribes English only: task 'transcribe', language 'en'")
        if options.prompt_condition_type not in PROMPT_CONDITIONS:
            raise ValueError(f"prompt_condition_type {options.prompt_condition_type!r} is not one of "
                             f"{', '.join(PROMPT_CONDITIONS)}")
        if options.prompt_condition_type == "all-segments" and not options.condition_on_previous_text:
            raise ValueError("prompt_condition_type 'all-segments' puts the prompt before the previous text: it "
                             "needs condition_on_previous_text")
        if tokens.previous is None and (options.prompt or options.condition_on_previous_text):
            raise ValueError(f"{model} has no <|startofprev|> token: it reads neither a prompt nor the previous text")
        if tokens.no_speech is None and options.no_speech_threshold is not None:
            raise ValueError(f"{model} has no <|nospeech|> token: no_speech_threshold cannot be applied")

    @property
    def detecting(self) -> bool:
        """Whether the next step detects the language (no window decoded yet)."""
        return self.language is None and self.tokens.multilingual

    def next_source(self) -> Source | None:
        """The next window (frames from `seek`, padded with zeros to a window) as an engine Source; None when
        done."""
        if self.seek >= self.frames:
            return None
        window = self.features[:, self.seek:self.seek + self.window_frames]  # (M, ≤ 3000)
        return Source([], None, features=F.pad(window, (0, self.window_frames - window.shape[-1])))  # (M, 3000)

    def decode_params(self) -> DecodeParams:
        """The params of the step next_source() gives."""
        tokens = self.tokens
        if self.detecting:  # transformers' detect_language: the likeliest language token after the start token
            return DecodeParams(max_new_tokens=1, decoder_prompt=(tokens.start,),
                                allowed_tokens=tuple(tokens.languages.values()))
        init = [tokens.start]
        if tokens.multilingual:
            init += [tokens.languages[self.language], tokens.tasks[self.options.task]]
        if not self.timestamps:
            init.append(tokens.no_timestamps)
        before = self.previous_text()
        prompt = tuple(before + init)
        room = tokens.max_target_positions - len(prompt)
        if (self.options.max_new_tokens or 0) > room:
            raise ValueError(f"max_new_tokens {self.options.max_new_tokens} after a prompt of {len(prompt)} tokens "
                             f"(the previous text's included) exceeds the model's {tokens.max_target_positions} "
                             f"positions")
        temperature = self.options.temperatures[self.tries]
        sampling = temperature > 0
        params = self.bundle.decode_params(num_beams=None if sampling else self.options.num_beams,
                                           max_new_tokens=self.options.max_new_tokens or room,
                                           temperature=temperature if sampling else None, do_sample=sampling,
                                           seed=self.options.seed + self.decodings if sampling else None)
        stamps = TimestampRules(tokens.no_timestamps, tokens.max_initial_timestamp) if self.timestamps else None
        no_speech = None if tokens.no_speech is None else NoSpeechProbe(len(before), tokens.no_speech)
        return replace(params, bad_words_ids=tuple((t,) for t in tokens.suppress), decoder_prompt=prompt,
                       suppress_at_begin=tokens.suppress_at_begin, timestamps=stamps, no_speech=no_speech,
                       renormalized_logprobs=True, token_timing=self.timing())

    def timing(self) -> TokenTiming | None:
        """What times the window's tokens for its words: the alignment heads over its encoder positions of audio
        (transformers crops them so, by the features' attention mask)."""
        if not self.options.word_timestamps:
            return None
        audio = min(self.audio_frames - self.seek, self.window_frames) // FRAMES_PER_POSITION
        return TokenTiming(self.tokens.alignment_heads, max(audio, 1), self.tokens.end)

    def previous_text(self) -> list[int]:
        """What the next window's decoder reads before <|startoftranscript|>, as transformers' generate builds it.
        Conditioned, once there is text (a segment, or a first-segment prompt): <|startofprev|> (all-segments: the
        prompt) and the last max_target_positions // 2 - 1 tokens of the prompt (first-segment) and the segments so
        far, each without the second timestamp of a pair it ends with; else the prompt."""
        first_segment = self.options.prompt_condition_type == "first-segment"
        texts = ([self.prompt[1:]] if self.prompt and first_segment else []) + [s.token_ids for s in self.segments]
        if not (self.conditioning and texts):
            return self.prompt
        stamp = self.tokens.first_timestamp
        text = [t for part in texts for t in (part[:-1] if len(part) > 2 and part[-2] >= stamp else part)]
        head = self.prompt if self.prompt and not first_segment else [self.tokens.previous]
        return head + text[-(self.tokens.max_target_positions // 2 - 1):]

    def take(self, hypothesis: Hypothesis) -> list[Segment]:
        """The decoded window's best hypothesis → its segments (kept for transcript()); the seek moves on. Nothing
        when the window is to be decoded again, at the next temperature (next_source() gives it once more), or when
        it heard no speech (skipped)."""
        ids = list(hypothesis.token_ids)
        self.decodings += 1
        if self.detecting:
            codes = {token: code for code, token in self.tokens.languages.items()}
            self.language = codes[ids[0]]
            return []
        n = len(ids)
        avg_logprob = hypothesis.score * n ** self.bundle.generation.length_penalty / n if n else 0.0
        if ids and ids[-1] == self.tokens.end:
            ids = ids[:-1]
        no_speech_prob = hypothesis.no_speech_prob or 0.0
        silent = self.silent(no_speech_prob, avg_logprob)
        if not silent and self.tries + 1 < len(self.options.temperatures) and self.falls_back(ids, avg_logprob):
            self.tries += 1
            return []
        temperature = self.options.temperatures[self.tries]
        frames = min(self.frames - self.seek, self.window_frames)
        out, advance = (([], frames) if silent
                        else self.window(ids, frames, avg_logprob, temperature, no_speech_prob, hypothesis.times))
        self.segments += out
        self.seek += advance
        self.tries = 0
        # transformers': the try that stands, kept or skipped, says whether the next window reads the text so far
        self.conditioning = self.options.condition_on_previous_text and temperature < LOW_TEMPERATURE
        return out

    def window(self, ids: list[int], frames: int, avg_logprob: float, temperature: float, no_speech_prob: float,
               times: TokenTimes | None) -> tuple[list[Segment], int]:
        """A window's tokens (</s> dropped) and its decoding's figures → its segments and the frames to seek on."""
        parts, advance = window_segments(ids, self.tokens.first_timestamp, frames)
        offset = self.seek * FRAME_SECONDS
        # within the audio: a window's timestamps may run past its last sample (to 30 s, as the padding allows)
        out, first = [], 0  # first: the index of a segment's first token in ids
        for start, end, part in parts:
            start, end = min(offset + start, self.duration), min(offset + end, self.duration)
            words = self.words(part, first, times, offset, start, end) if times else ()
            out.append(Segment(start, end, self.bundle.decode(list(part)), tuple(part), avg_logprob, temperature,
                               no_speech_prob, self.seek, words))
            first += len(part)
        return out, advance

    def words(self, part: list[int], first: int, times: TokenTimes, offset: float, start: float,
              end: float) -> tuple[Word, ...]:
        """A segment's words: its tokens `part`, from index `first` of the window's (at `offset` seconds), within
        the segment's times (start, end). openai-whisper moves a segment's bounds onto its words instead; here a
        segment keeps the timestamps the model decoded, with words or without."""
        text = [(k, token) for k, token in enumerate(part, first) if token < self.tokens.end]

        def seconds(position: int) -> float:
            return min(max(round(offset + position * TIMESTAMP_SECONDS, 2), start), end)
        return segment_words(self.bundle.tokenizer.token_bytes([token for _, token in text]), [k for k, _ in text],
                             times, seconds, (self.language or "en") in SPACELESS)

    def falls_back(self, ids: list[int], avg_logprob: float) -> bool:
        """Whether a window's tokens (</s> dropped) fail the options' thresholds."""
        ratio, least = self.options.compression_ratio_threshold, self.options.logprob_threshold
        return ((ratio is not None and compression_ratio(self.bundle.decode(ids)) > ratio)
                or (least is not None and avg_logprob < least))

    def silent(self, no_speech_prob: float, avg_logprob: float) -> bool:
        """Whether a decoded window heard no speech, to be skipped: transformers' rule (openai-whisper's but at the
        limits); without a logprob_threshold, on its no-speech probability alone (openai-whisper's)."""
        limit, least = self.options.no_speech_threshold, self.options.logprob_threshold
        return limit is not None and no_speech_prob > limit and (least is None or avg_logprob < least)

    def transcript(self) -> Transcript:
        return Transcript(self.language or "en", self.duration, tuple(self.segments),
                          "".join(s.text for s in self.segments))


def window_segments(ids: list[int], first_stamp: int,
                    frames: int) -> tuple[list[tuple[float, float, list[int]]], int]:
    """A window's tokens (</s> dropped) → its segments (start and end seconds within the window, tokens) and the
    frames to seek on: transformers' _retrieve_segment. Consecutive timestamps close a segment; a window ending on
    a single timestamp is done, else the text after the last pair is dropped and the next window starts at it."""
    is_stamp = [t >= first_stamp for t in ids]
    closes = [i + 1 for i in range(len(ids) - 1) if is_stamp[i] and is_stamp[i + 1]]
    if not closes:  # one segment: up to its last timestamp, else the whole window
        stamps = [t for t in ids if t >= first_stamp]
        end = ((stamps[-1] - first_stamp) if stamps and stamps[-1] != first_stamp
               else int(frames * FRAME_SECONDS / TIMESTAMP_SECONDS))
        return [(0.0, end * TIMESTAMP_SECONDS, ids)], frames
    single_ending = is_stamp[-2:] == [False, True]
    if single_ending:
        closes.append(len(ids))
    else:
        closes[-1] += 1  # the last segment keeps both of its closing timestamps
    segments, start = [], 0
    for i, end in enumerate(closes):
        part = ids[start:end]
        last = -1 if i < len(closes) - 1 or single_ending else -2
        segments.append(((part[0] - first_stamp) * TIMESTAMP_SECONDS, (part[last] - first_stamp) * TIMESTAMP_SECONDS,
                         part))
        start = end
    advance = frames if single_ending else (ids[start - 2] - first_stamp) * FRAMES_PER_POSITION
    return segments, advance


class Transcriber:
    """Audio → Transcript on a Whisper checkpoint, windows of many audios decoded in one continuous batch."""

    def __init__(self, bundle: ModelBundle):
        if bundle.network.audio_front is None:
            raise ValueError(f"{bundle.name} is a {bundle.family} model, not a speech model")
        self.bundle = bundle

    @classmethod
    def from_pretrained(cls, path: str | Path | None = None, device: str = "cpu",
                        dtype: str = "float32") -> "Transcriber":
        return cls(load(path, device=device, dtype=dtype))

    def transcribe(self, samples: np.ndarray, options: SpeechOptions = SpeechOptions()) -> Transcript:
        return self.transcribe_all([samples], options)[0]

    @torch.inference_mode()
    def transcribe_all(self, audios: list[np.ndarray], options: SpeechOptions = SpeechOptions(),
                       batch_size: int = 16) -> list[Transcript]:
        """Each audio's transcript, in order; up to `batch_size` windows (of different audios) decode together."""
        walks = [SpeechWindows(self.bundle, samples, options) for samples in audios]
        beams = options.num_beams or self.bundle.generation.num_beams
        decoder = BatchDecoder(self.bundle.network, capacity=batch_size * beams, max_source_len=1,
                               max_new_tokens=self.bundle.tokenizer.speech.max_target_positions - 1)
        waiting = list(range(len(walks)))  # audios whose next window may join
        while waiting or decoder.searches:
            joining = []
            for key in list(waiting):
                source = walks[key].next_source()
                if source is None:
                    waiting.remove(key)
                    continue
                params = walks[key].decode_params()
                if params.rows > decoder.free_rows - sum(p.rows for _, _, p in joining):
                    break
                joining.append((key, source.encoder_input, params))
                waiting.remove(key)
            if joining:
                decoder.admit(joining)
            for event in decoder.step():
                if event.error is not None:
                    raise event.error
                if event.results is not None:
                    walks[event.key].take(event.results[0])
                    waiting.append(event.key)
        return [walk.transcript() for walk in walks]
