"""Output parity with transformers' MarianTokenizer + MarianMTModel (the oracle)."""

import shutil

import pytest
import torch
from cases import on_two_of
from marian_fixtures import SENTENCES, VARIANTS
from transformers import MarianMTModel
from transformers import MarianTokenizer as HFTokenizer

from model import Translator, load
from model.cli import main as translate_cli

pytestmark = pytest.mark.slow

MAX_NEW_TOKENS = 40


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, checkpoints):
    path = checkpoints[request.param]
    hf_model = MarianMTModel.from_pretrained(path, dtype=torch.float32).eval()
    return path, hf_model, HFTokenizer.from_pretrained(path)


def run_cli(path, tmp_path, lines, *args) -> list[str]:
    src, out = tmp_path / "src.txt", tmp_path / "out.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert translate_cli(["--model", str(path), "--dtype", "float32", "--input", str(src), "--output", str(out), *args]) == 0
    return out.read_text(encoding="utf-8").split("\n")[:-1]


def test_token_ids_match(variant):
    path, _, hf_tok = variant
    ours = load(path, weights=False).tokenizer
    for text in SENTENCES + ["", "</s> mid <unk> specials <pad>", ">>fr<<no space", ">>xx<< unknown code"]:
        assert ours.encode(text) == hf_tok(text)["input_ids"], text


def test_decoder_logits_match(variant):
    path, hf_model, hf_tok = variant
    ours = load(path).network
    batch = hf_tok(SENTENCES, return_tensors="pt", padding=True)
    torch.manual_seed(0)
    tgt = torch.randint(3, hf_model.config.decoder_vocab_size - 1, (len(SENTENCES), 9))
    tgt[:, 0] = hf_model.config.decoder_start_token_id
    with torch.no_grad():
        expected = hf_model(**batch, decoder_input_ids=tgt).logits
        got = ours(batch["input_ids"], batch["attention_mask"].bool(), tgt)
    assert (expected - got).abs().max().item() < 1e-4


@pytest.mark.parametrize("variant,beams,length_penalty", on_two_of(list(VARIANTS), [
    (1, 1.0), (2, 0.6), (3, 1.0), (4, 2.0), (5, 0.6), (5, 2.0), (2, 2.0), (4, 1.0)]), indirect=["variant"])
def test_cli_translations_match_generate(variant, tmp_path, beams, length_penalty):
    path, hf_model, hf_tok = variant
    batch = hf_tok(SENTENCES, return_tensors="pt", padding=True)
    with torch.no_grad():
        ids = hf_model.generate(**batch, num_beams=beams, length_penalty=length_penalty,
                                max_new_tokens=MAX_NEW_TOKENS)
    expected = hf_tok.batch_decode(ids, skip_special_tokens=True)
    got = run_cli(path, tmp_path, SENTENCES, "--beam-size", str(beams), "--length-penalty", str(length_penalty),
                  "--max-new-tokens", str(MAX_NEW_TOKENS), "--batch-size", "3")
    assert got == expected


def test_beam_scores_match_generate(checkpoint):
    hf_model = MarianMTModel.from_pretrained(checkpoint, dtype=torch.float32).eval()
    hf_tok = HFTokenizer.from_pretrained(checkpoint)
    batch = hf_tok(SENTENCES[:3], return_tensors="pt", padding=True)
    out = hf_model.generate(**batch, num_beams=4, num_return_sequences=3, max_new_tokens=MAX_NEW_TOKENS,
                            output_scores=True, return_dict_in_generate=True)
    expected_texts = hf_tok.batch_decode(out.sequences, skip_special_tokens=True)
    got = Translator.from_pretrained(checkpoint).translate(SENTENCES[:3], beam_size=4, n_best=3,
                                                           max_new_tokens=MAX_NEW_TOKENS)
    for i, translation in enumerate(got):
        nbest = [translation] + translation.alternatives
        assert [t.text for t in nbest] == expected_texts[3 * i: 3 * i + 3]
        for t, score in zip(nbest, out.sequences_scores[3 * i: 3 * i + 3].tolist()):
            assert t.score == pytest.approx(score, abs=1e-5)


def hf_generated(sequences: torch.Tensor, pad_id: int) -> list[list[int]]:
    """generate's rows → generated ids as the Translator reports them: no decoder start, no padding (the
    Marian fixtures ban <pad>, so it only ever pads)."""
    out = []
    for row in sequences.tolist():
        ids = row[1:]
        while ids and ids[-1] == pad_id:
            ids.pop()
        out.append(ids)
    return out


@pytest.fixture(scope="module", params=list(VARIANTS))
def eos_variant(request, checkpoints, tmp_path_factory):
    """A Marian variant whose </s> bias is raised so that hypotheses end at varied lengths.

    The random fixtures almost never produce </s> before the limit, so every beam ends there and early_stopping
    cannot matter. The bias is calibrated on the model's own greedy outputs: </s> gets within the 20 % quantile
    of its gap to the best logit (an offset picked so that True, False and "never" give different outputs).
    """
    src = checkpoints[request.param]
    dst = tmp_path_factory.mktemp(f"eos-{request.param}")
    for f in src.iterdir():
        if f.suffix in (".spm", ".json") and f.name != "config.json":
            shutil.copy(f, dst / f.name)
    hf_model = MarianMTModel.from_pretrained(src, dtype=torch.float32).eval()
    hf_tok = HFTokenizer.from_pretrained(src)
    batch = hf_tok(SENTENCES, return_tensors="pt", padding=True)
    eos = hf_model.config.eos_token_id
    with torch.no_grad():
        ids = hf_model.generate(**batch, num_beams=1, max_new_tokens=MAX_NEW_TOKENS)
        logits = hf_model(**batch, decoder_input_ids=ids).logits[:, :-1]
        gap = logits.max(-1).values - logits[..., eos]
        hf_model.final_logits_bias[0, eos] += torch.quantile(gap.flatten(), 0.2).item()
    hf_model.save_pretrained(dst)
    return dst, MarianMTModel.from_pretrained(dst, dtype=torch.float32).eval(), HFTokenizer.from_pretrained(dst)


# (beams, length_penalty, early_stopping values that must change some output versus False on each variant it runs on)
EARLY_STOPPING_CASES = [(2, 1.0, {True, "never"}), (2, 1.5, {True, "never"}), (4, 2.0, {True}), (3, -0.5, set())]


@pytest.mark.parametrize("eos_variant,beams,length_penalty,changes", on_two_of(list(VARIANTS), EARLY_STOPPING_CASES),
                         indirect=["eos_variant"])
def test_early_stopping_matches_generate(eos_variant, beams, length_penalty, changes):
    """early_stopping True / False / "never": the same hypotheses and scores as transformers' beam search."""
    path, hf_model, hf_tok = eos_variant
    translator = Translator.from_pretrained(path)
    batch = hf_tok(SENTENCES, return_tensors="pt", padding=True)
    outputs = {}
    for early_stopping in (False, True, "never"):
        with torch.no_grad():
            out = hf_model.generate(**batch, num_beams=beams, length_penalty=length_penalty,
                                    early_stopping=early_stopping, max_new_tokens=MAX_NEW_TOKENS,
                                    output_scores=True, return_dict_in_generate=True)
        got = translator.translate(SENTENCES, beam_size=beams, length_penalty=length_penalty,
                                   max_new_tokens=MAX_NEW_TOKENS, early_stopping=early_stopping)
        expected = hf_generated(out.sequences, hf_tok.pad_token_id)
        assert [t.token_ids for t in got] == expected, early_stopping
        # float32 sums of up to 40 log-probabilities (|score| up to a few hundred here, scaled by the length's
        # penalty), added in another order than transformers adds them: equal to ~80 float32 ulps
        assert [t.score for t in got] == pytest.approx(out.sequences_scores.tolist(), rel=1e-5, abs=1e-4), \
            early_stopping
        outputs[early_stopping] = expected
    # The case exercises what it claims: some hypotheses end before the limit, and the listed settings matter.
    assert any(len(ids) < MAX_NEW_TOKENS for out in outputs.values() for ids in out)
    for early_stopping in changes:
        assert outputs[early_stopping] != outputs[False], early_stopping


def ngrams(ids: list[int], n: int) -> set[tuple[int, ...]]:
    return {tuple(ids[i: i + n]) for i in range(len(ids) - n + 1)}


@pytest.mark.parametrize("beams", [1, 3])
def test_multi_token_bad_words_match_generate(variant, beams):
    """Banning 2- and 3-token words the model produces changes its output, exactly as transformers does."""
    path, hf_model, hf_tok = variant
    translator = Translator.from_pretrained(path)
    texts, pad, limit = SENTENCES[:4], hf_tok.pad_token_id, 20
    plain = [t.token_ids for t in translator.translate(texts, beam_size=beams, max_new_tokens=limit)]
    bigram, trigram = tuple(plain[1][2:4]), tuple(plain[3][5:8])
    assert len(bigram) == 2 and len(trigram) == 3
    bad = ((pad,), bigram, trigram)
    got = [t.token_ids for t in translator.translate(texts, beam_size=beams, max_new_tokens=limit,
                                                     bad_words_ids=bad)]
    batch = hf_tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        sequences = hf_model.generate(**batch, num_beams=beams, max_new_tokens=limit,
                                      bad_words_ids=[list(word) for word in bad])
    assert got == hf_generated(sequences, pad)
    assert got[1] != plain[1] and got[3] != plain[3]  # the ban changed the outputs that held those words
    for ids in got:
        assert bigram not in ngrams(ids, 2) and trigram not in ngrams(ids, 3) and pad not in ids


def test_a_ban_that_starts_with_the_decoder_start_token_matches_generate(checkpoint):
    """transformers matches bad words against the decoder input, start token included: banning (start, t) bans t
    as the first generated token."""
    from model import Translator

    hf_model = MarianMTModel.from_pretrained(checkpoint, dtype=torch.float32).eval()
    hf_tok = HFTokenizer.from_pretrained(checkpoint)
    translator = Translator.from_pretrained(checkpoint)
    start = hf_model.config.decoder_start_token_id
    first = translator.translate(SENTENCES[:1], beam_size=1, max_new_tokens=8)[0].token_ids[0]
    bans = ((start,), (start, first))
    got = translator.translate(SENTENCES[:1], beam_size=1, max_new_tokens=8, bad_words_ids=bans)[0]
    batch = hf_tok(SENTENCES[:1], return_tensors="pt")
    expected = hf_model.generate(**batch, num_beams=1, max_new_tokens=8, bad_words_ids=[list(b) for b in bans])
    assert got.token_ids[0] != first
    assert got.token_ids == expected[0, 1:].tolist()[: len(got.token_ids)]
