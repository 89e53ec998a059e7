"""Word alignment from cross-attention: the weights equal transformers' `output_attentions` cross_attentions (Marian,
T5 v1.0/v1.1/MADLAD, BART; every decoder layer, every head); tokens find their words through what they spell (every
family's tokenizer); a hand-made attention matrix gives the expected word alignment; the command line puts HTML
tags around the words the alignment gives."""

import re

import pytest
import torch
from marian_fixtures import SENTENCES as MARIAN_SENTENCES
from oracles import aligned_span
from text2text_fixtures import BART_SENTENCES, T5_SENTENCES
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from model import AlignmentInput, Translator, load, word_alignments
from model.alignment import cross_attentions, word_alignment
from model.text.inline import token_words
from model.text.inline import word_spans

pytestmark = pytest.mark.slow

PARITY = [("marian", name) for name in ("shared-swish-safetensors", "separate-relu-bin", "gelu-untied")] + [
    ("text2text", name) for name in ("t5_v1_0", "t5_v1_1", "madlad", "bart")]


@pytest.fixture(params=PARITY, ids=[name for _, name in PARITY])
def tiny(request, checkpoints, text2text_checkpoints):
    kind, name = request.param
    path = checkpoints[name] if kind == "marian" else text2text_checkpoints[name]
    sentences = MARIAN_SENTENCES if kind == "marian" else BART_SENTENCES if name == "bart" else T5_SENTENCES
    return path, [s.replace("\n", " ") for s in sentences]


def test_cross_attention_weights_equal_transformers(tiny):
    path, sentences = tiny
    hf_tok = AutoTokenizer.from_pretrained(path)
    hf_model = AutoModelForSeq2SeqLM.from_pretrained(path, attn_implementation="eager").eval()
    network = load(path).network
    batch = hf_tok(sentences, return_tensors="pt", padding=True)
    g = torch.Generator().manual_seed(0)
    tgt = torch.randint(3, network.config.target_vocab_size - 1, (len(sentences), 7), generator=g)
    tgt[:, 0] = network.config.decoder_start_token_id
    with torch.no_grad():
        expected = hf_model(**batch, decoder_input_ids=tgt, output_attentions=True).cross_attentions
        for layer in range(network.config.decoder_layers):  # (B, H, T, S), every head
            got = network.cross_attention(batch["input_ids"], batch["attention_mask"].bool(), tgt, layer)
            torch.testing.assert_close(got, expected[layer], atol=1e-4, rtol=0)
    # per unit, unpadded, averaged over heads; row t is the attention while predicting generated token t
    sources = [hf_tok(s)["input_ids"] for s in sentences]
    generated = [row[1:].tolist()[: 2 + i] for i, row in enumerate(tgt)]
    layer = network.alignment_layer
    for i, got in enumerate(cross_attentions(network, list(zip(sources, generated)), layer)):
        mean = expected[layer][i].mean(0)[: len(generated[i]), : len(sources[i])]
        torch.testing.assert_close(got, mean, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", [name for _, name in PARITY] + ["m2m100", "nllb", "mbart50"])
def test_every_word_of_a_text_gets_its_tokens(name, checkpoints, text2text_checkpoints, family_checkpoints):
    """Each family's token_bytes: every word of a source finds its tokens, and so does every word of a
    translation (generated ids, a forced language token and </s> included)."""
    bundle = load({**checkpoints, **text2text_checkpoints, **family_checkpoints}[name])
    texts = ["The quick brown fox jumps over the lazy dog, and then it asks the teacher for advice.", "Hello."]
    for text in texts:
        ids = bundle.source(text).ids
        found = {w for words in token_words(text, bundle.tokenizer.token_bytes(ids, source=True)) for w in words}
        assert found == set(range(len(word_spans(text)))), text
    target_lang = bundle.languages.target[0] if bundle.languages.target else None
    for target in Translator(bundle).translate(texts, target_lang=target_lang, max_new_tokens=12):
        spelled = bundle.tokenizer.token_bytes(target.token_ids)
        found = {w for words in token_words(target.text, spelled) for w in words}
        # random weights may generate half a UTF-8 character (decoded as U+FFFD, which no token spells)
        whole = {w for w, (start, end) in enumerate(word_spans(target.text)) if "\ufffd" not in target.text[start:end]}
        assert whole <= found, (target.text, spelled)


def test_token_words_and_word_alignment_from_a_hand_made_matrix():
    source, target = "A red house.", "Une maison rouge."
    # SentencePiece-style source with a language token and </s>; target pieces split a word ("rou" "ge")
    source_tokens = [b">>fr<<", b" A", b" red", b" house", b".", b"</s>"]
    target_tokens = [b" Une", b" mai", b"son", b" rou", b"ge.", b"</s>"]
    source_words = token_words(source, source_tokens)
    target_words = token_words(target, target_tokens)
    assert source_words == [[], [0], [1], [2], [3], []]
    assert target_words == [[0], [1], [1], [2], [2, 3], []]  # "ge." ends "rouge" and is the full stop
    attention = torch.tensor([  # rows: target tokens; columns: source tokens
        [0.1, 0.7, 0.0, 0.1, 0.0, 0.1],  # Une → A
        [0.0, 0.0, 0.2, 0.4, 0.0, 0.4],  # mai → house (</s> gets more, but belongs to no word)
        [0.0, 0.0, 0.3, 0.3, 0.0, 0.4],  # son: a tie alone, house with "mai"
        [0.0, 0.0, 0.5, 0.2, 0.1, 0.2],  # rou → red
        [0.0, 0.0, 0.3, 0.0, 0.4, 0.3],  # ge. → rouge: red 0.8 over "." 0.5; the full stop: "." 0.4
        [0.2, 0.2, 0.2, 0.2, 0.0, 0.2],  # </s>: no word
    ])
    alignment = word_alignment(attention, source_words, target_words, 4, 4)
    assert alignment == [(0, 0), (2, 1), (1, 2), (3, 3)]
    assert word_alignment(attention[:, :0], [], target_words, 0, 4) == []  # nothing to align with


def test_tokens_that_spell_nothing_in_the_text_belong_to_no_word():
    text = "Ça va, très bien"
    spelled = [b"<2fr>", b" \xc3\x87a", b" va", b",", b" tr", b"\xc3", b"\xa8s", b" <unk>", b" bien", b"</s>"]
    assert token_words(text, spelled) == [[], [0], [1], [2], [3], [3], [3], [], [4], []]  # byte pieces included


HTML = ('<p>one hundred and <b class="n" data-x=\'1 &amp; 2\'>seven</b></p>\n'
        '<p><a href="/x?a=1&amp;b=2" title="T">one hundred</a> and seven</p>')


def tags(text: str) -> list[str]:
    return re.findall(r"<[^>]*>", text)


def test_the_command_line_puts_tags_around_the_aligned_words(tmp_path):
    from model.cli import main

    (tmp_path / "in.html").write_text(HTML, encoding="utf-8")
    assert main(["--dtype", "float32", "--target-lang", "fr", "--input", str(tmp_path / "in.html"), "--output",
                 str(tmp_path / "out.html")]) == 0
    out = (tmp_path / "out.html").read_text(encoding="utf-8")
    assert tags(out) == tags(HTML)  # every tag once, in order, attributes byte for byte
    translator = Translator.from_pretrained()
    bundle = translator.bundle
    unit = "one hundred and seven"
    translation = translator.translate([unit], target_lang="fr")[0]
    alignment, = word_alignments(bundle, [AlignmentInput(unit, bundle.source(unit, None, "fr").ids,
                                                         translation.token_ids)])
    assert re.sub(r"<[^>]*>", "", out) == f"{translation.text}\n{translation.text}"
    assert f"<b class=\"n\" data-x='1 &amp; 2'>{aligned_span(unit, 'seven', translation.text, alignment)}</b>" in out
    assert f'title="T">{aligned_span(unit, "one hundred", translation.text, alignment)}</a>' in out
