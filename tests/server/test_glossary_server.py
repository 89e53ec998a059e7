"""A translation job's glossary reaches the engine: every sentence's translation (the running batch of the in-process
service, sentences of a text decoded side by side) contains the target terms of the source terms it contains, and
a target term the model cannot spell is refused with its name."""

import asyncio

import pytest

from model import demo_model_dir
from server.domain import DecodeOptions, TranslationJob
from server.errors import InvalidRequest
from server.front.registry import ModelEntry
from server.runtime.local import load_service
from server.settings import Settings


@pytest.fixture(scope="module")
def service():
    service = load_service(ModelEntry("demo", str(demo_model_dir()), "marian", (), (), 1, 512),
                           Settings(dtype="float32", engine_process=False))
    yield service
    service.close()


def translate(service, texts: tuple[str, ...], glossary=(), beams: int | None = None) -> list[str]:
    job = TranslationJob(texts=texts, fields=tuple(f"text[{i}]" for i in range(len(texts))), target_lang="fr",
                         options=DecodeOptions(num_beams=beams), glossary=glossary)
    return [t.text for t in asyncio.run(service.translate(job)).texts]


@pytest.mark.parametrize("beams", [None, 4])
def test_every_sentence_keeps_the_target_terms_of_its_source_terms(service, beams):
    texts = ("one hundred and forty-two", "Seven thousand and  Forty-Two.\nthree hundred and five", "sixty")
    glossary = (("forty-two", "quarante-trois"), ("three hundred", "quatre cents"))
    plain = translate(service, texts, beams=beams)
    kept = translate(service, texts, glossary, beams=beams)
    assert "quarante-trois" in kept[0] and "quarante-trois" not in plain[0]
    first, second = kept[1].split("\n")
    assert "quarante-trois" in first and "quatre cents" in second and "quarante-trois" not in second
    assert kept[2] == plain[2]  # no source term: decoded as without a glossary


def test_a_target_term_the_model_cannot_spell_is_refused_by_name(service):
    with pytest.raises(InvalidRequest, match="'漢字'"):
        translate(service, ("forty-two",), (("forty-two", "漢字"),))


def test_a_glossary_with_sampling_is_refused(service):
    job = TranslationJob(texts=("forty-two",), fields=("text",), target_lang="fr",
                         options=DecodeOptions(temperature=0.7), glossary=(("forty-two", "quarante-trois"),))
    with pytest.raises(InvalidRequest, match="sampling"):
        asyncio.run(service.translate(job))
