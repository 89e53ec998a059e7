"""Request and response bodies: one Pydantic schema per intent, limits in Field constraints.

The limits here are the native API's documented schema (/openapi.json states them, and a request over one is
answered in validation's words); the front (front/dispatch.py) is where every limit is enforced, for every API."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, WithJsonSchema, create_model, model_validator


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def texts_type(max_texts: int | None, max_chars: int | None):
    """Validated as a list (a bare string is wrapped first); documented as what clients may send."""
    text_schema = {"type": "string", **({"maxLength": max_chars} if max_chars else {})}
    return Annotated[list[Annotated[str, Field(max_length=max_chars)]], Field(min_length=1, max_length=max_texts),
                     WithJsonSchema({"anyOf": [text_schema, {"type": "array", "items": text_schema, "minItems": 1,
                                                             **({"maxItems": max_texts} if max_texts else {})}],
                                     "description": f"one text, or a list of 1..{max_texts or 'N'} texts",
                                     "examples": ["one hundred and twenty-three"]})]


TagList = Annotated[list[Annotated[str, Field(min_length=1, max_length=64)]], Field(max_length=64)]


class TranslateRequest(Strict):
    """The shape; `request_schemas(settings)` derives the class the routes use, with the server's limits."""

    text: texts_type(None, None)
    _single: bool = PrivateAttr(False)
    source_lang: str | None = Field(None, max_length=32, examples=["en", "auto"],
                                    description='"auto": detected per text among the served source languages')
    target_lang: str | None = Field(None, max_length=32, examples=["de"])
    model: str | None = Field(None, max_length=200)
    beam_size: int | None = Field(None, ge=1)
    max_new_tokens: int | None = Field(None, ge=1)
    length_penalty: float | None = Field(None, ge=-10.0, le=10.0, allow_inf_nan=False)
    n_best: int = Field(1, ge=1)
    return_scores: bool = False
    format: Literal["text", "html", "xml"] = Field("text", description="html, xml: only text nodes are translated")
    split_sentences: Literal["0", "1", "nonewlines"] | None = Field(
        None, description='"1": line breaks, then sentences; "nonewlines": sentences only; "0": the text as one unit. '
                          'Default "1" for text, "nonewlines" for markup')
    ignore_tags: TagList | None = Field(None, description="markup elements whose contents come back untouched")
    non_splitting_tags: TagList | None = Field(None, description="markup elements that never cut a sentence")
    splitting_tags: TagList | None = Field(None, description="markup elements that always cut one")
    glossary_id: str | None = Field(None, max_length=64, description="a glossary of /v1/glossaries (or DeepL's): its "
                                    "dictionary from source_lang to target_lang (both required) is kept")
    glossary: dict[str, str] | None = Field(None, examples=[{"forty-two": "quarante-deux"}],
                                            description='{"source term": "target term", ...}: where a source term '
                                                        'occurs in a sentence, its target term is in the translation')

    @model_validator(mode="wrap")
    @classmethod
    def _one_text(cls, data, handler):
        """Accept a bare string as a list of one (errors then name `text`, not a union branch)."""
        single = isinstance(data, dict) and isinstance(data.get("text"), str)
        if single:
            data = {**data, "text": [data["text"]]}
        request = handler(data)
        request._single = single
        return request

    def field_name(self, index: int) -> str:
        return "text" if self._single else f"text[{index}]"


class Alternative(BaseModel):
    text: str
    score: float | None = None


class Detected(BaseModel):
    language: str = Field(description="ISO 639-1 where the language has one, else ISO 639-3")
    confidence: float = Field(ge=0.0, le=1.0)


class TranslationItem(BaseModel):
    text: str
    score: float | None = None
    alternatives: list[Alternative] | None = None
    detected_language: Detected | None = Field(None, description='set when source_lang was "auto" or missing')


class Usage(BaseModel):
    input_tokens: int
    output_tokens: int


class TranslateResponse(BaseModel):
    model: str
    translations: list[TranslationItem]
    usage: Usage


class GenerateRequest(Strict):
    text: str
    model: str | None = Field(None, max_length=200)
    source_lang: str | None = Field(None, max_length=32, description="for translation models, as in /v1/translate")
    target_lang: str | None = Field(None, max_length=32, description="for translation models, as in /v1/translate")
    max_new_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, gt=0.0, le=100.0, allow_inf_nan=False)
    top_k: int | None = Field(None, ge=0, le=100_000)
    top_p: float | None = Field(None, gt=0.0, le=1.0, allow_inf_nan=False)
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    num_beams: int | None = Field(None, ge=1)
    length_penalty: float | None = Field(None, ge=-10.0, le=10.0, allow_inf_nan=False)
    repetition_penalty: float | None = Field(None, ge=0.1, le=10.0, allow_inf_nan=False,  # ÷ or × 10 at most
                                             description="as transformers: > 1 discourages tokens already generated")
    no_repeat_ngram_size: int | None = Field(None, ge=0, le=32, description="0 turns the model's default off")
    min_new_tokens: int | None = Field(None, ge=0)
    stop: list[str] | None = Field(None, max_length=16)
    stream: bool = False


def request_schemas(settings) -> tuple[type[TranslateRequest], type[GenerateRequest]]:
    """The request schemas with this server's configured limits as Field constraints, so validation and the
    OpenAPI document say the same as the settings (raising --max-beams raises what the schema accepts)."""
    beams = settings.beam_limit
    translate = create_model("TranslateRequest", __base__=TranslateRequest,
                             text=(texts_type(settings.max_texts, settings.max_document_chars), ...),
                             beam_size=(int | None, Field(None, ge=1, le=beams)),
                             n_best=(int, Field(1, ge=1, le=beams)))
    generate = create_model("GenerateRequest", __base__=GenerateRequest,
                            text=(str, Field(max_length=settings.max_generate_chars)),
                            num_beams=(int | None, Field(None, ge=1, le=beams)))
    return translate, generate


class GenerateResponse(BaseModel):
    model: str
    text: str
    finish_reason: Literal["eos", "length", "stop"]
    usage: Usage


class ModelLimits(BaseModel):
    max_texts: int
    max_input_tokens: int
    max_new_tokens: int
    max_beams: int
    max_request_chars: int = Field(description="characters of a translate request's texts together")
    max_document_chars: int = Field(description="characters of one text of a translate request")
    max_generate_chars: int = Field(description="characters of a /v1/generate text")
    max_audio_bytes: int | None = Field(None, description="a speech model's: bytes of one audio file")
    max_audio_seconds: float | None = Field(None, description="a speech model's: seconds of one audio file")


class Language(BaseModel):
    code: str = Field(description="the model's own code (fra_Latn, fr_XX, fr, fra)")
    iso: str | None = Field(description="ISO 639-1 where the language has one, else ISO 639-3")


class ModelCard(BaseModel):
    """An entry of OpenAI's model list (id, object, created, owned_by) with this server's fields beside them."""

    id: str
    object: Literal["model"] = "model"
    created: int = Field(description="when this server started serving (Unix seconds)")
    owned_by: str = "seq2seq-serve"
    family: str
    languages: list[str] = Field(description="target language codes (the model's own)")
    source_languages: list[Language]
    target_languages: list[Language]
    default_beam_size: int
    speech: bool = Field(False, description="a speech model: it takes audio (/v1/audio/*, /v1/transcribe), not text")
    device: str = Field(description="where the model runs: cpu or cuda")
    dtype: str = Field(description="the number format its weights run in (float32, bfloat16, float16, int8)")
    kernels: str | None = Field(None, description="on a CPU, the instruction sets its kernels may use: oneDNN's "
                                "(capped by ONEDNN_MAX_CPU_ISA) and ATen's")
    limits: ModelLimits
    replicas: int | None = Field(None, description="Ray Serve: the model replicas serving now (autoscaling "
                                                   "changes it); null without Ray Serve")


class ModelList(BaseModel):
    """OpenAI's shape, so its clients (and front-ends that list models first) read it."""

    object: Literal["list"] = "list"
    data: list[ModelCard]
