"""Glossary terms (model.glossary): which target terms a source sentence calls for, and their target ids as each
family's target tokenizer spells them inside running text."""

import pytest

from family_fixtures import build_nllb
from text2text_fixtures import build_bart, build_t5

from model import Glossary, UnspellableTerm, check_terms, demo_model_dir, load, term_ids, with_glossary

GLOSSARY = Glossary([("forty-two", "quarante-trois"), ("New York", "NY"), ("new york city", "NYC"), ("York", "Y"),
                     ("C++", "cpp"), ("two", "deux")])


@pytest.mark.parametrize("sentence,targets", [
    ("forty-two", ("quarante-trois",)),
    ("FORTY-TWO", ("quarante-trois",)),  # case
    ("one hundred and  forty -\ttwo!", ("quarante-trois",)),  # spacing, punctuation next to it
    ("(forty-two), forty-two.", ("quarante-trois",)),  # each term once
    ("I love New   York City.", ("NYC",)),  # the longest term first: not NY, not Y
    ("New York and York", ("NY", "Y")),  # in sentence order, no overlap with the longer match
    ("Newark yorkshire fortytwo", ()),  # whole words only
    ("twofold forty-two-thousand", ("quarante-trois",)),  # a term inside a word is no match; a hyphen is a boundary
    ("c++ and two", ("cpp", "deux")),
    ("", ()),
])
def test_source_terms_match_whole_words_whatever_the_case_and_spacing_longest_first(sentence, targets):
    assert GLOSSARY.targets(sentence) == targets


def test_an_empty_source_term_matches_nothing_and_a_repeated_one_takes_the_last_target():
    glossary = Glossary([("  ", "x"), ("cat", "chat"), ("Cat", "matou")])
    assert glossary.targets("the cat") == ("matou",)


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory, checkpoints):
    root = tmp_path_factory.mktemp("glossary")
    paths = {"demo (marian)": demo_model_dir(), "marian separate vocabularies": checkpoints["separate-relu-bin"],
             "nllb": build_nllb(root / "nllb"), "t5": build_t5(root / "t5"), "bart": build_bart(root / "bart")}
    return {name: load(path, weights=False).tokenizer for name, path in paths.items()}


@pytest.mark.parametrize("family", ["demo (marian)", "marian separate vocabularies", "nllb", "t5", "bart"])
def test_a_target_term_is_spelled_as_inside_running_text(tokenizers, family):
    """Its ids decode to the term and occur in the ids of a sentence that contains it after a space."""
    tokenizer = tokenizers[family]
    term = "quarante-trois" if family == "demo (marian)" else "the river"
    ids = term_ids(tokenizer, term)
    assert tokenizer.decode(list(ids)).strip() == term  # byte-level BPE keeps the leading space it spells
    sentence = tokenizer.encode_target(f"cent {term}" if family == "demo (marian)" else f"a house by {term}")
    assert any(tuple(sentence[i:i + len(ids)]) == ids for i in range(len(sentence))), (ids, sentence)


@pytest.mark.parametrize("family", ["demo (marian)", "nllb", "t5"])
def test_a_term_the_target_vocabulary_cannot_spell_raises_naming_it(tokenizers, family):
    with pytest.raises(UnspellableTerm, match="'漢字 🙂'") as raised:
        check_terms(tokenizers[family], ["quarante", "漢字 🙂"])
    assert raised.value.term == "漢字 🙂"


def test_a_sentence_becomes_the_constraints_of_its_terms_and_the_source_words_each_translates():
    bundle = load(demo_model_dir(), weights=False)
    tokenizer = bundle.tokenizer
    glossary = Glossary([("forty-two", "quarante-trois"), ("seven", "huit")])
    sentence = "Seven hundred and forty-two"  # words: Seven, hundred, and, forty, -, two
    source = bundle.source(sentence, None, "fr")
    got = with_glossary(tokenizer, glossary, source, sentence, bundle.config.target_vocab_size)
    assert got.constraints == (term_ids(tokenizer, "huit"), term_ids(tokenizer, "quarante-trois"))
    assert got.constraint_words == ((0,), (3, 4, 5))
    # every token spells a word of the sentence, in order; the language token spells none, and </s> is the end of
    # the source, a word after the last (6) that no term holds
    spelled = [w for w in got.source_words if w >= 0]
    assert len(got.source_words) == len(source.ids) and spelled == sorted(spelled) and set(spelled) == set(range(7))
    assert got.source_words[0] == -1 and got.source_words[-1] == 6
    assert got.decode_params(bundle.generation).constraint_words == got.constraint_words
    # the tokens glued to the word before them: `-` and `neuf` of `vingt-neuf`, not ` vingt` or </s>
    glued = got.decode_params(bundle.generation).glued
    assert [bool(glued[t >> 3] >> (t & 7) & 1) for t in tokenizer.encode_target("vingt-neuf") + [tokenizer.eos_id]] \
        == [False, True, True, False]
    one = bundle.source("one", None, "fr")
    assert with_glossary(tokenizer, glossary, one, "one", bundle.config.target_vocab_size) == one


def test_a_term_that_occurs_twice_is_two_constraints_each_on_its_own_words():
    bundle = load(demo_model_dir(), weights=False)
    tokenizer = bundle.tokenizer
    glossary = Glossary([("forty-two", "quarante-trois"), ("two", "trois")])
    sentence = "forty-two thousand, two hundred and forty-two"  # forty - two thousand , two hundred and forty - two
    got = with_glossary(tokenizer, glossary, bundle.source(sentence, None, "fr"), sentence,
                        bundle.config.target_vocab_size)
    assert got.constraints == (term_ids(tokenizer, "quarante-trois"), term_ids(tokenizer, "trois"),
                               term_ids(tokenizer, "quarante-trois"))
    assert got.constraint_words == ((0, 1, 2), (5,), (8, 9, 10))
