"""T5 v1.0, T5 v1.1, a MADLAD-style multilingual T5 and BART against transformers (the oracle): token ids, decoded
text, teacher-forced logits, generated text (greedy and beams × length penalties, with the checkpoints' own
generation rules: BART's no_repeat_ngram_size, min_length and early_stopping; a T5 with repetition_penalty);
KV-cache decoding against full re-decoding (T5's relative bias included); a request alone against the same request
inside a busy batch of mixed rules."""

import pytest
import torch
from cases import on_two_of
from oracles import assert_cached_steps_equal_full
from text2text_fixtures import BART_SENTENCES, MADLAD_TARGETS, T5_SENTENCES
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from model import BatchDecoder, Translator, UnsupportedLanguage, load
from model.cli import main as translate_cli

pytestmark = pytest.mark.slow

MAX_NEW_TOKENS = 25
NAMES = ["t5_v1_0", "t5_v1_1", "madlad", "bart"]


def sentences(name: str) -> list[str]:
    return BART_SENTENCES if name == "bart" else T5_SENTENCES


def lines(name: str) -> list[str]:
    return [s.replace("\n", " ") for s in sentences(name)]


@pytest.fixture(scope="module", params=NAMES)
def checkpoint(request, text2text_checkpoints):
    name = request.param
    path = text2text_checkpoints[name]
    return name, path, AutoTokenizer.from_pretrained(path), AutoModelForSeq2SeqLM.from_pretrained(path).eval()


def hf_generate(hf_tok, hf_model, texts: list[str], **kwargs) -> list[str]:
    batch = hf_tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        ids = hf_model.generate(**batch, **kwargs)
    return hf_tok.batch_decode(ids, skip_special_tokens=True)


def test_token_ids_match(checkpoint):
    name, path, hf_tok, _ = checkpoint
    bundle = load(path, weights=False)
    for text in sentences(name) + ["", "</s> <pad> <unk> <s>", "<extra_id_3> and <mask>"]:
        assert bundle.source(text).ids == hf_tok(text)["input_ids"], text


def test_decoded_text_matches(checkpoint):
    _, path, hf_tok, _ = checkpoint
    bundle = load(path, weights=False)
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        ids = torch.randint(0, bundle.config.target_vocab_size, (int(torch.randint(1, 15, (1,), generator=g)),),
                            generator=g).tolist()
        assert bundle.decode(ids + [bundle.config.eos_token_id]) == hf_tok.decode(ids, skip_special_tokens=True), ids


def test_teacher_forced_logits_match(checkpoint):
    name, path, hf_tok, hf_model = checkpoint
    network = load(path).network
    batch = hf_tok(sentences(name), return_tensors="pt", padding=True)
    tgt = torch.randint(3, network.config.target_vocab_size, (len(sentences(name)), 30),
                        generator=torch.Generator().manual_seed(0))  # 30 > the relative bias's max distance
    tgt[:, 0] = hf_model.config.decoder_start_token_id
    with torch.no_grad():
        expected = hf_model(**batch, decoder_input_ids=tgt).logits
        got = network(batch["input_ids"], batch["attention_mask"].bool(), tgt)
    assert (expected - got).abs().max().item() < 1e-4


@pytest.mark.parametrize("many_rows", [False, True])
def test_cached_steps_equal_full_redecoding(checkpoint, many_rows):
    """many_rows: a step of several rows (the relative bias as attention's mask, row by row)."""
    name, path, _, _ = checkpoint
    bundle = load(path)
    target = MADLAD_TARGETS[0] if name == "madlad" else None
    sources = [bundle.source(s, target_lang=target).ids for s in sentences(name)]
    if many_rows:
        sources = sources * -(-8 // len(sources))
    assert_cached_steps_equal_full(bundle.network, sources, steps=30, atol=3e-4)


@pytest.mark.parametrize("checkpoint,beams,length_penalty", on_two_of(NAMES, [
    (1, 1.0), (2, 0.6), (3, 1.0), (4, 2.0), (5, 0.6), (5, 2.0)]), indirect=["checkpoint"])
def test_cli_matches_generate(checkpoint, tmp_path, beams, length_penalty):
    """The CLI reads each line as the whole prompt; the checkpoint's generation rules apply to both sides."""
    name, path, hf_tok, hf_model = checkpoint
    texts = lines(name)
    target = []
    if name == "madlad":
        texts, target = [s.removeprefix("summarize: ") for s in texts], ["--target-lang", "de"]
    expected = hf_generate(hf_tok, hf_model, [f"<2de> {t}" for t in texts] if target else texts,
                           num_beams=beams, length_penalty=length_penalty, max_new_tokens=MAX_NEW_TOKENS)
    src, out = tmp_path / "src.txt", tmp_path / "out.txt"
    src.write_text("\n".join(texts) + "\n", encoding="utf-8")
    assert translate_cli(["--model", str(path), "--dtype", "float32", "--input", str(src), "--output", str(out), *target,
                          "--beam-size", str(beams), "--length-penalty", str(length_penalty),
                          "--max-new-tokens", str(MAX_NEW_TOKENS), "--batch-size", "3"]) == 0
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == expected
    assert len(set(expected)) > 2  # the random model says different things for different inputs


def test_bart_rules_shape_the_output(text2text_checkpoints):
    """The BART checkpoint's rules are in force (not only equal to transformers): no 3-gram repeats, at least
    min_length - 1 tokens, and the outputs differ from a run without them."""
    translator = Translator.from_pretrained(text2text_checkpoints["bart"])
    assert translator.bundle.generation.no_repeat_ngram_size == 3
    ruled = translator.translate(BART_SENTENCES, max_new_tokens=MAX_NEW_TOKENS)
    free = translator.translate(BART_SENTENCES, max_new_tokens=MAX_NEW_TOKENS, no_repeat_ngram_size=0,
                                min_new_tokens=0)
    for t in ruled:
        tokens = [translator.bundle.config.decoder_start_token_id] + t.token_ids
        trigrams = [tuple(tokens[i:i + 3]) for i in range(len(tokens) - 2)]
        assert len(trigrams) == len(set(trigrams))
        assert len(t.token_ids) >= 7
    assert [t.token_ids for t in ruled] != [t.token_ids for t in free]


@pytest.mark.parametrize("beams", [1, 3])
def test_repetition_penalty_matches_generate(text2text_checkpoints, beams):
    path = text2text_checkpoints["t5_v1_1"]
    hf_tok, hf_model = AutoTokenizer.from_pretrained(path), AutoModelForSeq2SeqLM.from_pretrained(path).eval()
    for penalty in (1.3, 0.7):
        expected = hf_generate(hf_tok, hf_model, T5_SENTENCES, num_beams=beams, repetition_penalty=penalty,
                               max_new_tokens=MAX_NEW_TOKENS)
        got = Translator.from_pretrained(path).translate(T5_SENTENCES, beam_size=beams, repetition_penalty=penalty,
                                                         max_new_tokens=MAX_NEW_TOKENS)
        assert [t.text for t in got] == expected, penalty
    plain = Translator.from_pretrained(path).translate(T5_SENTENCES, beam_size=beams, max_new_tokens=MAX_NEW_TOKENS)
    assert [t.text for t in plain] != expected  # the penalty changed something


def test_madlad_names_the_target_in_the_source(text2text_checkpoints):
    bundle = load(text2text_checkpoints["madlad"], weights=False)
    assert set(bundle.languages.target) == set(MADLAD_TARGETS)
    assert bundle.resolve_languages(None, "deu") == (None, "de")  # ISO 639-3 → the model's code
    assert bundle.source("Hello.", None, "fr").ids[0] == bundle.tokenizer.pieces.token_id("<2fr>")
    with pytest.raises(UnsupportedLanguage):
        bundle.resolve_languages(None, None)  # a translation must name the target
    with pytest.raises(UnsupportedLanguage):
        bundle.resolve_languages(None, "it")
    assert bundle.resolve_languages(None, None, translating=False) == (None, None)  # free generation need not


@pytest.mark.parametrize("static_shapes", [False, True])
@pytest.mark.parametrize("name", ["t5_v1_1", "bart"])
def test_alone_equals_inside_a_busy_mixed_batch(text2text_checkpoints, name, static_shapes):
    """Each request decoded alone equals the same request decoded while others (greedy, beams, other rules)
    join and leave the batch around it; also with the static-shape step (row buckets, the whole cache read,
    T5's relative bias over the whole target capacity)."""
    translator = Translator.from_pretrained(text2text_checkpoints[name])
    bundle = translator.bundle
    rules = [dict(), dict(no_repeat_ngram_size=2), dict(repetition_penalty=1.5), dict(min_new_tokens=6)]
    jobs = []
    for i, text in enumerate(lines(name) * 2):
        beams, overrides = 1 + i % 3, rules[i % len(rules)]
        alone = translator.translate([text], beam_size=beams, max_new_tokens=20, **overrides)[0]
        source = bundle.source(text)
        params = bundle.decode_params(num_beams=beams, max_new_tokens=20, forced_bos_token_id=source.forced_bos,
                                      **overrides)
        jobs.append((i, source.ids, params, alone))
    decoder = BatchDecoder(bundle.network, capacity=7, max_source_len=128, max_new_tokens=20,
                           static_shapes=static_shapes)
    pending, results = list(jobs), {}
    while pending or decoder.searches:
        if pending and decoder.free_rows >= pending[0][2].num_beams:  # one joins per step: staggered
            key, ids, params, _ = pending.pop(0)
            decoder.admit([(key, ids, params)])
        for event in decoder.step():
            if event.results:
                results[event.key] = event.results[0]
    for key, _, _, alone in jobs:
        assert results[key].token_ids == alone.token_ids, key
        assert results[key].score == pytest.approx(alone.score, abs=1e-4)


def test_a_madlad_text_may_name_its_target_itself(text2text_checkpoints, tmp_path):
    """MADLAD's own prompt form ("<2de> ...", as its model card writes it) needs no target_lang: the CLI, the
    Translator and transformers' generate on the same text agree; a target_lang that disagrees is refused."""
    path = text2text_checkpoints["madlad"]
    hf_tok, hf_model = AutoTokenizer.from_pretrained(path), AutoModelForSeq2SeqLM.from_pretrained(path).eval()
    texts = [s.removeprefix("summarize: ") for s in lines("madlad")]
    named = [f"<2de> {t}" for t in texts[:3]] + [f"<2fr> {t}" for t in texts[3:]]
    expected = hf_generate(hf_tok, hf_model, named, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
    src, out = tmp_path / "src.txt", tmp_path / "out.txt"
    src.write_text("\n".join(named) + "\n", encoding="utf-8")
    assert translate_cli(["--model", str(path), "--dtype", "float32", "--input", str(src), "--output", str(out), "--beam-size", "1",
                          "--max-new-tokens", str(MAX_NEW_TOKENS)]) == 0
    assert out.read_text(encoding="utf-8").split("\n")[:-1] == expected
    translator = Translator.from_pretrained(path)
    assert [t.text for t in translator.translate(texts[:3], target_lang="de", beam_size=1,
                                                 max_new_tokens=MAX_NEW_TOKENS)] == expected[:3]
    assert [t.text for t in translator.translate(named[:3], target_lang="deu", beam_size=1,  # the same, agreeing
                                                 max_new_tokens=MAX_NEW_TOKENS)] == expected[:3]
    with pytest.raises(UnsupportedLanguage, match=r"target_lang 'fr' disagrees with the target the text names at "
                                                  r"its start \('de'\)"):
        translator.translate(named[:1], target_lang="fr")
    with pytest.raises(UnsupportedLanguage, match="target_lang is required"):
        translator.translate([named[0], texts[1]])  # one text names no target
