"""NLLB-200, M2M100 and mBART-50 against transformers (the oracle): token ids, logits, generated text, n-best
scores; KV-cache decoding against full re-decoding; one batch mixing target languages against each alone."""

import pytest
import torch
from family_fixtures import FAMILY_SENTENCES
from oracles import assert_cached_steps_equal_full
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from model import BatchDecoder, Translator, load
from model.cli import main as translate_cli
from model.network.transformer import pack_rows

pytestmark = pytest.mark.slow

MAX_NEW_TOKENS = 30
# Per family: a non-default source language and two target languages, in the model's own codes.
LANGUAGES = {
    "nllb": ("deu_Latn", ["fra_Latn", "spa_Latn"]),
    "m2m100": ("de", ["fr", "es"]),
    "mbart50": ("de_DE", ["fr_XX", "es_XX"]),
}


@pytest.fixture(scope="module", params=list(LANGUAGES))
def family(request, family_checkpoints):
    name = request.param
    path = family_checkpoints[name]
    source, targets = LANGUAGES[name]
    hf_tok = AutoTokenizer.from_pretrained(path, src_lang=source)
    hf_model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=torch.float32).eval()
    return name, path, source, targets, hf_tok, hf_model


def language_id(hf_tok, code: str) -> int:
    """transformers' id for a target code (M2M100 names `fr` as the token `__fr__`)."""
    return hf_tok.get_lang_id(code) if hasattr(hf_tok, "get_lang_id") else hf_tok.convert_tokens_to_ids(code)


def run_cli(path, tmp_path, lines, *args) -> list[str]:
    src, out = tmp_path / "src.txt", tmp_path / "out.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert translate_cli(["--model", str(path), "--dtype", "float32", "--input", str(src), "--output", str(out),
                          *args]) == 0
    return out.read_text(encoding="utf-8").split("\n")[:-1]


# Lines the CLI reads one per line (no newline inside).
LINES = [s.replace("\n", " ") for s in FAMILY_SENTENCES]


def test_token_ids_match(family):
    _, path, source, _, hf_tok, _ = family
    bundle = load(path, weights=False)
    for text in FAMILY_SENTENCES + ["", "</s> <pad> <unk> <s>"]:
        assert bundle.source(text, source).ids == hf_tok(text)["input_ids"], text
    default = load(path, weights=False).languages.default_source
    assert bundle.source("Hello.").ids == AutoTokenizer.from_pretrained(path, src_lang=default)("Hello.")["input_ids"]


def test_decoded_text_matches(family):
    _, path, _, targets, hf_tok, _ = family
    bundle = load(path, weights=False)
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        ids = torch.randint(0, bundle.config.target_vocab_size, (int(torch.randint(1, 15, (1,), generator=g)),),
                            generator=g).tolist()
        ids = [bundle.tokenizer.forced_bos(targets[0])] + ids + [bundle.config.eos_token_id]
        assert bundle.decode(ids) == hf_tok.decode(ids, skip_special_tokens=True), ids


def test_teacher_forced_logits_match(family):
    _, path, _, _, hf_tok, hf_model = family
    network = load(path).network
    batch = hf_tok(FAMILY_SENTENCES, return_tensors="pt", padding=True)
    tgt = torch.randint(4, network.config.target_vocab_size, (len(FAMILY_SENTENCES), 9),
                        generator=torch.Generator().manual_seed(0))
    tgt[:, 0] = hf_model.config.decoder_start_token_id
    with torch.no_grad():
        expected = hf_model(**batch, decoder_input_ids=tgt).logits
        got = network(batch["input_ids"], batch["attention_mask"].bool(), tgt)
    assert (expected - got).abs().max().item() < 1e-4


@pytest.mark.parametrize("row_tokens", [128, 1])  # all sources in one packed row; each in its own
def test_packed_encoding_equals_padded(family, row_tokens):
    """The engine encodes a batch without padding (sources packed into rows, a block-diagonal mask): on every real
    token the encoder output equals the padded batch's, a source with a <pad> token inside included (fairseq
    numbering skips it)."""
    _, path, source, _, _, _ = family
    bundle = load(path)
    sources = [bundle.source(text, source).ids for text in FAMILY_SENTENCES * 2]
    assert any(bundle.network.config.pad_token_id in ids for ids in sources)
    with torch.inference_mode():
        memory, mask = bundle.network.encode_sources(sources, row_tokens)  # (B, S, D), (B, S)
        padded = torch.full(mask.shape, bundle.network.config.pad_token_id)
        for i, ids in enumerate(sources):
            padded[i, :len(ids)] = torch.tensor(ids)
        expected = bundle.network.encode(padded, mask)
    torch.testing.assert_close(memory[mask], expected[mask], atol=1e-4, rtol=1e-4)
    assert not memory[~mask].any()


def test_sources_pack_whole_and_in_order():
    assert pack_rows([3, 4, 2, 6, 1], 7) == ([0, 0, 1, 2, 2], [0, 3, 0, 0, 6])
    assert pack_rows([9, 2], 7) == ([0, 1], [0, 0])  # a longer source than a row still gets one of its own


# each length penalty and four beam counts (test_parity walks the whole grid on Marian): every cell is two
# transformers beam searches per family
@pytest.mark.parametrize("beams,length_penalty", [(1, 1.0), (3, 0.6), (4, 2.0), (5, 1.0)])
def test_cli_translations_match_generate(family, tmp_path, beams, length_penalty):
    _, path, source, targets, hf_tok, hf_model = family
    batch = hf_tok(LINES, return_tensors="pt", padding=True)
    for target in targets:
        with torch.no_grad():
            ids = hf_model.generate(**batch, forced_bos_token_id=language_id(hf_tok, target),
                                    num_beams=beams, length_penalty=length_penalty, max_new_tokens=MAX_NEW_TOKENS)
        expected = hf_tok.batch_decode(ids, skip_special_tokens=True)
        got = run_cli(path, tmp_path, LINES, "--source-lang", source, "--target-lang", target, "--beam-size",
                      str(beams), "--length-penalty", str(length_penalty), "--max-new-tokens", str(MAX_NEW_TOKENS),
                      "--batch-size", "3")
        assert got == expected, (target, beams, length_penalty)
        assert len(set(got)) > 3  # the random model says different things for different inputs


def test_nbest_scores_match_sequences_scores(family):
    _, path, source, targets, hf_tok, hf_model = family
    batch = hf_tok(LINES[:3], return_tensors="pt", padding=True)
    out = hf_model.generate(**batch, forced_bos_token_id=language_id(hf_tok, targets[1]), num_beams=4,
                            num_return_sequences=3, max_new_tokens=MAX_NEW_TOKENS, output_scores=True,
                            return_dict_in_generate=True)
    expected = hf_tok.batch_decode(out.sequences, skip_special_tokens=True)
    got = Translator.from_pretrained(path).translate(LINES[:3], source_lang=source, target_lang=targets[1],
                                                      beam_size=4, n_best=3, max_new_tokens=MAX_NEW_TOKENS)
    for i, translation in enumerate(got):
        nbest = [translation] + translation.alternatives
        assert [t.text for t in nbest] == expected[3 * i: 3 * i + 3]
        for t, score in zip(nbest, out.sequences_scores[3 * i: 3 * i + 3].tolist()):
            assert t.score == pytest.approx(score, abs=1e-5)


def test_cached_steps_equal_full_redecoding(family):
    _, path, source, targets, _, _ = family
    bundle = load(path)
    sources = [bundle.source(s, source, targets[0]).ids for s in FAMILY_SENTENCES]
    assert_cached_steps_equal_full(bundle.network, sources, atol=3e-4)  # float noise on logits of scale ~4


def test_one_batch_mixing_target_languages_equals_each_alone(family_checkpoints):
    """A running batch of one NLLB model holds requests for different targets (greedy and beams)."""
    translator = Translator.from_pretrained(family_checkpoints["nllb"])
    bundle = translator.bundle
    targets = ["fra_Latn", "spa_Latn", "deu_Latn", "zho_Hans"]
    jobs = []
    for i, text in enumerate(LINES):
        target, beams = targets[i % len(targets)], 1 + i % 3
        alone = translator.translate([text], source_lang="eng_Latn", target_lang=target, beam_size=beams,
                                     max_new_tokens=20)[0]
        source = bundle.source(text, "eng_Latn", target)
        params = bundle.decode_params(num_beams=beams, max_new_tokens=20, forced_bos_token_id=source.forced_bos)
        jobs.append((i, source.ids, params, alone))
        assert alone.token_ids[0] == bundle.tokenizer.codes[target]
    decoder = BatchDecoder(bundle.network, capacity=8, max_source_len=128, max_new_tokens=20)
    pending, results = list(jobs), {}
    while pending or decoder.searches:
        admitted = []
        while pending and decoder.free_rows - sum(p.num_beams for _, _, p in admitted) >= pending[0][2].num_beams:
            key, ids, params, _ = pending.pop(0)
            admitted.append((key, ids, params))
        if admitted:
            decoder.admit(admitted)
        for event in decoder.step():
            if event.results:
                results[event.key] = event.results[0]
    for key, _, _, alone in jobs:
        assert results[key].token_ids == alone.token_ids
        assert results[key].score == pytest.approx(alone.score, abs=1e-4)


def test_m2m100_generation_settings_in_config_json_alone(family_checkpoints, tmp_path):
    """As facebook/m2m100_418M ships it: num_beams, max_length and early_stopping in config.json and no
    generation_config.json. The defaults a request starts from, and its default translation, are transformers'."""
    import json
    import shutil

    path = tmp_path / "m2m100-config-only"
    shutil.copytree(family_checkpoints["m2m100"], path)
    (path / "generation_config.json").unlink()
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(config | dict(num_beams=3, max_length=24, early_stopping=True)))
    hf_tok = AutoTokenizer.from_pretrained(path, src_lang="de")
    hf_model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=torch.float32).eval()
    assert (hf_model.generation_config.num_beams, hf_model.generation_config.max_length) == (3, 24)

    params = load(path, weights=False).decode_params()
    assert (params.num_beams, params.max_new_tokens, params.early_stopping) == (3, 23, True)
    batch = hf_tok(FAMILY_SENTENCES[:4], return_tensors="pt", padding=True)
    with torch.no_grad():  # transformers' defaults, the target language forced as the first token
        out = hf_model.generate(**batch, forced_bos_token_id=language_id(hf_tok, "fr"))
    expected = hf_tok.batch_decode(out, skip_special_tokens=True)
    got = Translator.from_pretrained(path).translate(FAMILY_SENTENCES[:4], source_lang="de", target_lang="fr")
    assert [t.text for t in got] == expected
