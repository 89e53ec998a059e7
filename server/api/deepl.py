"""DeepL's API v2 (translate, languages, usage), mapped onto the domain: drop-in for the official `deepl` clients
with `server_url`, and for tools that let users set a DeepL endpoint. Its glossaries (v2 and v3) are
api.deepl_glossaries; `glossary_id` here keeps a glossary's terms in the translation, `glossary_ids` (up to five)
those of several (the first one's target where two hold a source term).

Authentication: `Authorization: DeepL-Auth-Key KEY`, or the legacy `auth_key` parameter. Bodies are JSON or
urlencoded forms (`text` repeated). Errors are `{"message": "..."}`: 400 bad request, 403 key rejected, 413 too
many texts or characters, 429 rate limit (with Retry-After), 456 character quota used up (or the glossaries a
key may keep). Accepted but not applicable: `formality` (no served model has formality levels: every target says
supports_formality false), `preserve_formatting` (the engine never corrects formatting), `context` (the models
translate each sentence alone; not billed, as DeepL bills none). `model_type` is answered with `model_type_used`:
`latency_optimized`, the one model a language pair has. `tag_handling_version` v1 and v2 alike parse XML strictly
(this server has one tag handling): invalid markup is DeepL's v2 400, "Tag handling parsing failed, please check
input.", then what and where. `custom_instructions` and `style_id` are refused (400): the models follow neither
instructions nor style rules. `GET /v3/languages?resource=` lists the languages per DeepL resource.
"""

from __future__ import annotations

from typing import Literal, Sequence

from fastapi import Request
from pydantic import BaseModel, Field, field_validator

from ..domain import TextOptions, TranslatedText, TranslationJob, TranslationResult
from ..errors import (BodyTooLarge, GlossaryNeedsLanguage, InvalidMarkup, InvalidRequest, LanguageNotServed,
                      NotFollowed, ServerError, TooManyCharacters, TooManyGlossaries, TooManyItems, UnsupportedFileType)
from ..front import dispatch
from ..front.access import QuotaExceeded, characters
from ..front.served_languages import ServedLanguages, canonical, check_served, language_name
from ..glossary_entries import Entries
from .deps import KeySending, caller_of, served
from .errors import BAD_REQUEST, LIMITS, ErrorStyle, InvalidKey, Names, message_only, naming
from .reading import Params, present, read_params, validated
from .resending import resendable
from .streaming import json_response, until_disconnect

MAX_TEXTS = 50  # DeepL's limit per request
MAX_GLOSSARY_IDS = 5  # glossaries one translate request may name (DeepL's, as its client checks)
NO_CHARACTER_LIMIT = 1_000_000_000_000  # the character_limit DeepL reports for an account without a limit
AUTH_KEY = KeySending("deepl-auth-key", "auth_key", "Invalid auth key: send Authorization: DeepL-Auth-Key <key>")
GLOSSARY_NEEDS_SOURCE = "Use of a glossary requires the source_lang parameter to be specified"
TAG_LISTS = ("ignore_tags", "non_splitting_tags", "splitting_tags")
# DeepL's target codes name a variety where its source codes do not.
TARGET_VARIANTS = {"EN": ("EN-GB", "EN-US"), "PT": ("PT-BR", "PT-PT")}
MARKUP_REJECTED = "Tag handling parsing failed, please check input."  # DeepL's v2 answer to markup it cannot parse
# DeepL's model types name a goal; each served language pair has one model, which is DeepL's latency_optimized kind
# (no slower model of higher quality is there to choose).
MODEL_TYPE_USED = "latency_optimized"
# GET /v3/languages: the features each DeepL resource has here, and the side a language needs to be on for one
# ("both": every language of a pair; DeepL's feature table). The resources this server has no route for list no
# language, so a tool hides them.
V3_FEATURES = {"translate_text": {"tag_handling": "both", "glossary": "both", "auto_detection": "source"},
               "translate_document": {"glossary": "both", "auto_detection": "source"},
               "glossary": {}}
V3_RESOURCES = (*V3_FEATURES, "voice", "write", "style_rules")
STABLE = {"status": "stable"}
# What each refused guidance is called in DeepL's request, and why it is refused.
GUIDANCE = {"instructions": ("custom_instructions", "this server's models translate the text alone and do not "
                                                    "follow free-text instructions"),
            "style rules": ("style_id", "this server's models translate the text alone and apply no style rules")}


def owns(path: str) -> bool:
    return path.startswith(("/v2/", "/v3/"))


def request_too_large(error: TooManyCharacters, names: Names) -> ServerError:
    return BodyTooLarge(f"Request too large: {error.count} characters; at most {error.limit}", field=names.texts,
                        limit=error.limit)


def too_many_texts(error: TooManyItems, names: Names) -> ServerError:
    return BodyTooLarge(f"Too many texts: {error.count}; at most {error.limit}", field="text", limit=error.limit)


def not_served(error: LanguageNotServed, names: Names) -> ServerError:
    return InvalidRequest(f"Value for '{error.field}' not supported.", field=error.field)


def file_type(error: UnsupportedFileType, names: Names) -> ServerError:
    return InvalidRequest(invalid("file", f"the file type of {error.filename!r}; supported: "
                                          f"{', '.join(error.supported)}"), field="file")


def glossary_needs_source(error: GlossaryNeedsLanguage, names: Names) -> ServerError:
    return InvalidRequest(GLOSSARY_NEEDS_SOURCE, field="source_lang")  # DeepL's target is always given


def markup_rejected(error: InvalidMarkup, names: Names) -> ServerError:
    return InvalidRequest(f"{MARKUP_REJECTED} {error.message}", field=error.field)  # DeepL's words, then where


def not_followed(error: NotFollowed, names: Names) -> ServerError:
    field, why = GUIDANCE[error.kind]
    return InvalidRequest(invalid(field, why), field=field)


STYLE = ErrorStyle(message_only("message"), owns, {**LIMITS, **BAD_REQUEST, TooManyCharacters: request_too_large,
                                                   InvalidKey: 403, QuotaExceeded: 456, TooManyGlossaries: 456,
                                                   LanguageNotServed: not_served, UnsupportedFileType: file_type,
                                                   GlossaryNeedsLanguage: glossary_needs_source,
                                                   TooManyItems: too_many_texts, InvalidMarkup: markup_rejected,
                                                   NotFollowed: not_followed})
router = STYLE.router()


class DeepLTranslateForm(BaseModel):
    text: list[str] = Field(min_length=1)
    target_lang: str = Field(min_length=1, max_length=32)
    source_lang: str | None = Field(None, max_length=32)
    split_sentences: Literal["0", "1", "nonewlines"] | None = None
    tag_handling: Literal["xml", "html"] | None = None
    tag_handling_version: Literal["v1", "v2"] | None = None
    ignore_tags: list[str] = []
    non_splitting_tags: list[str] = []
    splitting_tags: list[str] = []
    preserve_formatting: bool = False
    formality: Literal["default", "more", "less", "prefer_more", "prefer_less"] | None = None
    context: str | None = None
    model_type: Literal["quality_optimized", "latency_optimized", "prefer_quality_optimized"] | None = None
    glossary_id: str | None = None
    glossary_ids: list[str] = Field([], max_length=MAX_GLOSSARY_IDS)
    show_billed_characters: bool = False
    custom_instructions: list[str] = []
    style_id: str | None = None

    @field_validator("split_sentences", mode="before")
    @classmethod
    def _as_text(cls, value):
        return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


class DeepLTranslation(BaseModel):
    detected_source_language: str
    text: str
    billed_characters: int  # always sent: the official client reads it unconditionally
    model_type_used: str | None = None  # when the request names a model_type, as DeepL answers


class DeepLTranslateResponse(BaseModel):
    translations: list[DeepLTranslation]


class DeepLLanguage(BaseModel):
    language: str
    name: str
    supports_formality: bool | None = None  # targets only


class DeepLLanguageV3(BaseModel):
    lang: str  # BCP 47: en, en-GB, zh-Hans
    name: str
    usable_as_source: bool
    usable_as_target: bool
    status: str = "stable"
    features: dict[str, dict[str, str]]  # a feature's name → {"status"}; absent when not supported


def missing(name: str) -> str:
    return f"Parameter '{name}' not specified."


def invalid(name: str, why: str) -> str:
    return f"Value for '{name}' not supported: {why}"


def tag_list(params: Params, name: str) -> list[str]:
    """A list in JSON, comma-separated (and possibly repeated) in a form."""
    return [tag.strip() for value in params.many(name) for tag in str(value).split(",") if tag.strip()]


def text_options(form: DeepLTranslateForm) -> TextOptions:
    markup = form.tag_handling or "text"
    split = form.split_sentences or ("nonewlines" if markup == "html" else "1")
    return TextOptions(format=markup, split_sentences=split, ignore_tags=tuple(form.ignore_tags),
                       non_splitting_tags=tuple(form.non_splitting_tags), splitting_tags=tuple(form.splitting_tags))


def translate_response(result: TranslationResult, form: DeepLTranslateForm) -> DeepLTranslateResponse:
    def source_of(translated: TranslatedText) -> str:
        found = translated.detected or next((t.detected for t in result.texts if t.detected), None)
        return (form.source_lang or (found.language if found else "")).upper()

    model_type_used = MODEL_TYPE_USED if form.model_type else None
    return DeepLTranslateResponse(translations=[
        DeepLTranslation(detected_source_language=source_of(t), text=t.text, billed_characters=len(text),
                         model_type_used=model_type_used)
        for t, text in zip(result.texts, form.text)])


def language_entries(languages: ServedLanguages, kind: str) -> list[DeepLLanguage]:
    if kind == "source":
        codes = dict.fromkeys(code.partition("-")[0].upper() for code in languages.sources)
        return [DeepLLanguage(language=code, name=language_name(code)) for code in codes]
    codes = dict.fromkeys(variant for code in languages.targets
                          for variant in TARGET_VARIANTS.get(code.upper(), (code.upper(),)))
    return [DeepLLanguage(language=code, name=language_name(code), supports_formality=False) for code in codes]


def bcp47(code: str) -> str:
    """DeepL's v3 spelling of a code: the language lower-case, the rest as the tag writes it (en-GB, zh-Hans)."""
    language, dash, rest = code.partition("-")
    return language.lower() + dash + rest


def language_entries_v3(languages: ServedLanguages, resource: str) -> list[DeepLLanguageV3]:
    if resource not in V3_FEATURES:
        return []
    sources = dict.fromkeys(code.partition("-")[0].lower() for code in languages.sources)
    targets = dict.fromkeys(bcp47(variant) for code in languages.targets
                            for variant in TARGET_VARIANTS.get(code.upper(), (code,)))

    def entry(lang: str) -> DeepLLanguageV3:
        source, target = lang in sources, lang in targets
        features = {name: STABLE for name, side in V3_FEATURES[resource].items()
                    if side == "both" or (side == "source" and source)}
        return DeepLLanguageV3(lang=lang, name=language_name(lang), usable_as_source=source, usable_as_target=target,
                               features=features)

    return [entry(lang) for lang in dict.fromkeys([*sources, *targets])]


async def caller(request: Request, work: bool = False) -> tuple[str, Params]:
    """The caller, from the key as DeepL's clients send it, and the request's parameters."""
    params = await read_params(request)
    return await caller_of(request, AUTH_KEY, params, work), params


async def glossary_terms(request: Request, who: str, glossary_id: str | None, source_lang: str | None,
                         target_lang: str, glossary_ids: Sequence[str] = ()) -> Entries:
    """The entries of the glossaries a text or document request names (none without glossary_id or glossary_ids),
    in DeepL's errors: 400 for both, without source_lang or for a glossary without that language pair, 404 for one
    unknown to the caller's key."""
    if glossary_id is not None and glossary_ids:
        raise InvalidRequest("glossary_ids cannot be used together with glossary_id", field="glossary_ids")
    named = [glossary_id] if glossary_id is not None else list(glossary_ids)
    if not named:
        return ()
    glossaries = served(request).glossaries
    return await glossaries.merged_terms(glossaries.owner(who), named, source_lang, target_lang)


@router.post("/v2/translate", response_model=DeepLTranslateResponse)
@resendable
async def translate(request: Request):
    state = served(request)
    who, params = await caller(request, work=True)
    data = present(params, list(DeepLTranslateForm.model_fields), lists=("text", "custom_instructions", "glossary_ids"))
    data.update({name: tag_list(params, name) for name in TAG_LISTS if name in params})
    form = validated(DeepLTranslateForm, data, missing, invalid)
    dispatch.check_items(len(form.text), MAX_TEXTS)
    check_served(state.provider, form.source_lang, form.target_lang)
    glossary = await glossary_terms(request, who, form.glossary_id, form.source_lang, form.target_lang,
                                    form.glossary_ids)
    job = TranslationJob(
        texts=tuple(form.text), fields=tuple(f"text[{i}]" for i in range(len(form.text))),
        source_lang=canonical(form.source_lang) if form.source_lang else None, target_lang=canonical(form.target_lang),
        text_options=text_options(form), glossary=glossary, instructions=tuple(form.custom_instructions),
        style_rules=form.style_id)
    naming(request, "text")

    async def work():
        result = await dispatch.translate(state.provider, job, spending=state.keys.spending(who, characters(form.text)))
        return json_response(translate_response(result, form))

    return await until_disconnect(request, work())


@router.api_route("/v2/languages", methods=["GET", "POST"], response_model=list[DeepLLanguage])
@resendable
async def languages(request: Request):
    state = served(request)
    _, params = await caller(request)
    kind = str(params.first("type") or "source").lower()
    if kind not in ("source", "target"):
        raise InvalidRequest(invalid("type", "source or target"), field="type")
    return language_entries(ServedLanguages.of(state.provider), kind)


@router.get("/v3/languages", response_model=list[DeepLLanguageV3])
@resendable
async def languages_v3(request: Request):
    state = served(request)
    _, params = await caller(request)
    resource = params.first("resource") or params.first("product")  # `product`: the beta's first name for it
    if resource is None:
        raise InvalidRequest(missing("resource"), field="resource")
    if str(resource) not in V3_RESOURCES:
        raise InvalidRequest(invalid("resource", ", ".join(V3_RESOURCES)), field="resource")
    return language_entries_v3(ServedLanguages.of(state.provider), str(resource))


@router.api_route("/v2/usage", methods=["GET", "POST"])
@resendable
async def usage(request: Request):
    state = served(request)
    who, _ = await caller(request)
    used, quota = await state.keys.usage(who)
    return {"character_count": used, "character_limit": quota or NO_CHARACTER_LIMIT}
