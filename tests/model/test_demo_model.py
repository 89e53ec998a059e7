"""The embedded demo model: transformers loads it and agrees with us; accuracy guards the engine; the CLI
uses it when no model is given."""

import subprocess
import sys

import pytest
import torch
from num2words import num2words
from transformers import MarianMTModel
from transformers import MarianTokenizer as HFTokenizer

from model import Translator, demo_model_dir, resolve_dtype
from model.demo.data import LANGUAGES, held_out_numbers, target_text

pytestmark = pytest.mark.slow


def test_transformers_loads_the_checkpoint_and_agrees_on_20_numbers():
    path = demo_model_dir()
    hf_model = MarianMTModel.from_pretrained(path, dtype=torch.float32).eval()
    hf_tok = HFTokenizer.from_pretrained(path)
    numbers = held_out_numbers(20, seed=7)
    sources = [f">>{LANGUAGES[i % 4]}<< {num2words(n, lang='en')}" for i, n in enumerate(numbers)]
    batch = hf_tok(sources, return_tensors="pt", padding=True)
    translator = Translator.from_pretrained()
    for beams in (1, 4):
        with torch.no_grad():
            expected = hf_tok.batch_decode(hf_model.generate(**batch, num_beams=beams, max_new_tokens=64),
                                           skip_special_tokens=True)
        assert [t.text for t in translator.translate(sources, beam_size=beams, max_new_tokens=64)] == expected


def test_accuracy_on_held_out_numbers():
    translator = Translator.from_pretrained()
    numbers = held_out_numbers(60, seed=11)
    for lang in LANGUAGES:
        outputs = translator.translate([num2words(n, lang="en") for n in numbers], target_lang=lang)
        correct = sum(o.text == target_text(n, lang) for o, n in zip(outputs, numbers))
        assert correct >= 57, (lang, correct)  # the full evaluation measures 99-100 %


def test_cli_defaults_to_the_demo_model():
    result = subprocess.run([sys.executable, "-m", "model", "--target-lang", "de"],
                            input="one hundred and twenty-three\n\nforty-two\n", capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n") == ["einhundertdreiundzwanzig", "", "zweiundvierzig", ""]
    assert f"dtype: {resolve_dtype('auto', 'cpu')} (auto on cpu)" in result.stderr


@pytest.mark.parametrize("dtype", ["bfloat16", "int8"])
def test_bfloat16_and_int8_translate_held_out_numbers_like_float32(dtype):
    """The speed options (README benchmarks) keep the demo's translations: measured identical on 1,000 numbers."""
    numbers = held_out_numbers(24, seed=13)
    sources = [f">>{LANGUAGES[i % 4]}<< {num2words(n, lang='en')}" for i, n in enumerate(numbers)]
    expected = [t.text for t in Translator.from_pretrained().translate(sources)]
    assert [t.text for t in Translator.from_pretrained(dtype=dtype).translate(sources)] == expected


def test_a_glossary_term_takes_the_place_of_what_its_source_term_would_give():
    """French and Spanish write a number's last two digits as words of their own: a glossary forcing other ones
    (forty-two → quarante-trois) must change those words, not write the term beside them or in another place
    (the constraint begins where the decoder attends to its source term). Measured 32-37 of 40 here; without
    placing by source 22-32 (loadtests/README.md, Glossaries)."""
    from loadtests.bench_glossary import changed, glossary_case
    from model import Glossary

    translator = Translator.from_pretrained()
    numbers = held_out_numbers(40, seed=11)
    assert all(n % 100 for n in numbers)  # every number has last-two-digit words to force
    for lang in ("fr", "es"):
        glossaries = [Glossary([glossary_case(n, lang, changed(n))[:2]]) for n in numbers]
        for beams in (1, 4):
            outputs = translator.translate([num2words(n, lang="en") for n in numbers], target_lang=lang,
                                           beam_size=beams, glossary=glossaries)
            exact = sum(o.text == target_text(changed(n), lang) for o, n in zip(outputs, numbers))
            assert exact >= 30, (lang, beams, exact)
