"""OpenAI's completions and chat completions, mapped onto /v1/generate's path (front.generation): the
official `openai` clients and the tools on top of them (LangChain, front-ends) work with base_url=<server>/v1.

Each prompt (or, in chat, the conversation's text, see front.chat: the model's own template if it has one) is one
generation job; a list of prompts and `n` > 1 are several jobs in the running batch at once, their choices in order
(prompt by prompt, n each). `n` > 1 draws n samples (temperature 1 unless given; with a `seed` the i-th sample uses
seed + i); `temperature` 0 is greedy (one beam); no temperature and n 1: the model's own defaults. Prompt tokens
are the encoder's tokens, completion tokens the generated ones (as the native `usage`). Errors are
`{"error": {"message", "type", "param", "code"}}`: 400 a bad or unsupported parameter (named in `param`), 401 a key
rejected, 404 an unknown model, 429 rate limit or character quota, 503 the queue full (both with Retry-After).
GET /v1/models (native.models) answers OpenAI's list.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Literal

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field

from ..domain import DecodeOptions, GenerationJob, GenerationResult, StreamEvent
from ..errors import InvalidRequest, ServerError, TooManyTexts, UnknownModel
from ..front import generation
from ..front.chat import chat_text
from ..front.access import QuotaExceeded, characters
from .deps import AppState, KeySending, caller_of, served
from .errors import BAD_REQUEST, LIMITS, ErrorStyle, InvalidKey, Names, naming, openai_body
from .reading import read_params, validated
from .resending import resendable
from .streaming import DONE, event_response, sse, until_disconnect

PATHS = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/models"})
BEARER = KeySending("bearer", None, "Incorrect API key provided: send Authorization: Bearer <key>")
# Parameters with no meaning here: refused (400 naming them) unless given their neutral value.
UNSUPPORTED = {"echo": (False,), "suffix": ("",), "logprobs": (False,), "top_logprobs": (0,), "best_of": (1,),
               "logit_bias": ({},), "presence_penalty": (0,), "frequency_penalty": (0,), "tools": ([],),
               "functions": ([],), "tool_choice": ("none",), "response_format": ({"type": "text"},)}


def owns(path: str) -> bool:
    return path in PATHS


def over_choices(error: TooManyTexts, names: Names) -> ServerError:
    return InvalidRequest(f"{error.count} prompts × n {error.choices} is more than {error.limit} choices",
                          field="n" if error.choices > 1 else names.texts, limit=error.limit)


STYLE = ErrorStyle(openai_body, owns, {**LIMITS, **BAD_REQUEST, TooManyTexts: over_choices, UnknownModel: 404,
                                       InvalidKey: 401, QuotaExceeded: 429})
router = STYLE.router()


class StreamOptions(BaseModel):
    include_usage: bool = False


class Knobs(BaseModel):
    """What both endpoints take (unknown fields are ignored, as OpenAI-compatible servers do)."""

    model_config = ConfigDict(extra="ignore")
    model: str = Field(min_length=1, max_length=200)
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0.0, le=2.0, allow_inf_nan=False)
    top_p: float | None = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    stop: str | list[str] | None = Field(None, max_length=16)  # as /v1/generate's
    n: int = Field(1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = Field(None, max_length=256)
    source_lang: str | None = Field(None, max_length=32, description="translation models, as in /v1/generate")
    target_lang: str | None = Field(None, max_length=32)


class CompletionRequest(Knobs):
    prompt: str | list[str]


class TextPart(BaseModel):
    type: Literal["text"]
    text: str


class Message(BaseModel):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None

    @property
    def text(self) -> str:
        return self.content if isinstance(self.content, str) else "".join(p.text for p in self.content or ())


class ChatRequest(Knobs):
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)


@dataclass(frozen=True)
class Shape:
    """What differs between the two endpoints' answers: the object names and how a choice holds its text."""

    object: str
    chunk_object: str
    id_prefix: str
    whole: Callable[[str], dict]  # a choice of the full answer
    piece: Callable[[str], dict]  # a streamed choice's new text
    closing: dict  # a streamed choice's last chunk, beside its finish_reason
    opening: dict | None = None  # a streamed choice's first chunk, before any text


COMPLETION = Shape("text_completion", "text_completion", "cmpl-", lambda text: {"text": text},
                   lambda text: {"text": text}, closing={"text": ""})
CHAT = Shape("chat.completion", "chat.completion.chunk", "chatcmpl-",
             lambda text: {"message": {"role": "assistant", "content": text}},
             lambda text: {"delta": {"content": text}}, closing={"delta": {}},
             opening={"delta": {"role": "assistant", "content": ""}})


def refuse_unsupported(params: dict[str, Any]) -> None:
    for name, neutral in UNSUPPORTED.items():
        if params.get(name) is not None and params[name] not in neutral:
            raise InvalidRequest(f"{name} is not supported by this server", field=name)


def options(body: Knobs, max_tokens: int | None) -> DecodeOptions:
    """The decoding knobs of a prompt's choices (front.generation seeds each choice apart)."""
    if body.temperature == 0:
        if body.n > 1:
            raise InvalidRequest("n > 1 draws n samples: temperature must be above 0", field="n")
        return DecodeOptions(max_new_tokens=max_tokens, num_beams=1)  # greedy
    temperature = body.temperature if body.temperature is not None or body.n == 1 else 1.0
    return DecodeOptions(max_new_tokens=max_tokens, temperature=temperature, top_p=body.top_p, seed=body.seed)


def token_limit(body: Knobs) -> tuple[str, int | None]:
    """The parameter that limits the completion's tokens, as the request named it, and its value."""
    return next(((name, getattr(body, name)) for name in ("max_completion_tokens", "max_tokens")
                 if getattr(body, name, None)), ("max_tokens", None))


def jobs(body: Knobs, texts: list[str], fields: list[str]) -> list[GenerationJob]:
    """One job per prompt (front.generation makes its n choices)."""
    stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
    max_tokens = token_limit(body)[1]
    return [GenerationJob(text=text, options=options(body, max_tokens), stop=stop, source_lang=body.source_lang,
                          target_lang=body.target_lang, field=name) for text, name in zip(texts, fields)]


async def read(request: Request, schema: type[Knobs]) -> tuple[str, Knobs]:
    """The caller (from `Authorization: Bearer`, counted against its rate limit) and the body."""
    who = await caller_of(request, BEARER, work=True)
    params = await read_params(request)
    data = {name: params.first(name) for name in params.values}
    refuse_unsupported(data)
    return who, validated(schema, data, lambda name: f"{name}: a required parameter is missing",
                          lambda name, why: f"{name}: {why}")


@router.post("/v1/completions")
@resendable
async def completions(request: Request):
    state = served(request)
    who, body = await read(request, CompletionRequest)
    prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
    if not prompts:
        raise InvalidRequest("prompt: at least one prompt is required", field="prompt")
    fields = ["prompt"] if isinstance(body.prompt, str) else [f"prompt[{i}]" for i in range(len(prompts))]
    naming(request, "prompt", max_new_tokens=token_limit(body)[0])
    return await answer(request, state, who, COMPLETION, body, prompts, fields)


@router.post("/v1/chat/completions")
@resendable
async def chat_completions(request: Request):
    state = served(request)
    who, body = await read(request, ChatRequest)
    text = chat_text(state.provider, body.model, [(m.role, m.text) for m in body.messages])
    naming(request, "messages", max_new_tokens=token_limit(body)[0])
    return await answer(request, state, who, CHAT, body, [text], ["messages"])


async def answer(request: Request, state: AppState, who: str, shape: Shape, body: Knobs, texts: list[str],
                 fields: list[str]):
    """Every choice's events merged into one stream: folded into one answer, or sent as chunks."""
    prompts, spending = jobs(body, texts, fields), state.keys.spending(who, characters(texts))
    if not body.stream:
        async def work():
            results = await generation.generate(state.provider, prompts, body.model, body.n, spending)
            return JSONResponse({**answer_head(shape, results[0].model), "usage": usage(results, body.n), "choices": [
                {"index": i, **shape.whole(result.text), "finish_reason": finish_reason(result), "logprobs": None}
                for i, result in enumerate(results)]})

        return await until_disconnect(request, work())
    stream = await generation.stream(state.provider, prompts, body.model, body.n, spending)
    include_usage = bool(body.stream_options and body.stream_options.include_usage)
    return event_response(chunks({**answer_head(shape, stream.model), "object": shape.chunk_object}, shape,
                                 stream.events, len(prompts) * body.n, body.n, include_usage))


def answer_head(shape: Shape, model: str) -> dict:
    """What every answer and chunk of one request begins with."""
    return {"id": shape.id_prefix + uuid.uuid4().hex, "object": shape.object, "created": int(time.time()),
            "model": model}


async def chunks(head: dict, shape: Shape, events, count: int, n: int, include_usage: bool):
    """Server-sent chunks: (chat) an opening one per choice, then text pieces, a last one per choice with its
    finish_reason, (include_usage) one with the usage and no choices, then [DONE]. An error after the first event
    is sent as an event in OpenAI's shape (its clients raise it)."""
    def chunk(index: int, choice: dict, reason: str | None = None) -> str:
        return sse({**head, "choices": [{"index": index, **choice, "finish_reason": reason, "logprobs": None}]})

    finals: list[StreamEvent | None] = [None] * count
    try:
        if shape.opening:
            for index in range(count):
                yield chunk(index, shape.opening)
        async for index, event in events:
            if event.text:
                yield chunk(index, shape.piece(event.text))
            if event.finish_reason:
                finals[index] = event
                yield chunk(index, shape.closing, finish_reason(event))
        if include_usage:
            yield sse({**head, "choices": [], "usage": usage(finals, n)})
        yield DONE
    except ServerError as e:
        yield sse(STYLE.payload(e))
    finally:
        await events.aclose()


def finish_reason(final: StreamEvent | GenerationResult) -> str:
    return "length" if final.finish_reason == "length" else "stop"  # "eos" and a stop string alike


def usage(finals: list[StreamEvent] | list[GenerationResult], n: int) -> dict:
    """Prompt tokens once per prompt (its n choices share it), completion tokens of every choice."""
    prompt = sum(final.input_tokens for final in finals[::n])
    completion = sum(final.output_tokens for final in finals)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
