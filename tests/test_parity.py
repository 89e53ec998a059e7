"""Output parity with transformers' MarianTokenizer + MarianMTModel (the oracle)."""

import pytest
import torch
from marian_fixtures import SENTENCES, VARIANTS
from transformers import MarianMTModel
from transformers import MarianTokenizer as HFTokenizer

from model import load
from model.translate import main as translate_cli

MAX_NEW_TOKENS = 40


@pytest.fixture(scope="module", params=list(VARIANTS))
def variant(request, checkpoints):
    path = checkpoints[request.param]
    hf_model = MarianMTModel.from_pretrained(path, dtype=torch.float32).eval()
    return path, hf_model, HFTokenizer.from_pretrained(path)


def run_cli(path, tmp_path, lines, *args) -> list[str]:
    src, out = tmp_path / "src.txt", tmp_path / "out.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert translate_cli(["--model", str(path), "--input", str(src), "--output", str(out), *args]) == 0
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


@pytest.mark.parametrize("beams,length_penalty", [(1, 1.0), (2, 0.6), (3, 1.0), (4, 2.0), (5, 0.6), (5, 2.0),
                                                  (2, 2.0), (4, 1.0)])
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
    from model import Translator

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
