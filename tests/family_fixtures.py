"""Tiny M2M100, NLLB and mBART-50 checkpoints built with transformers (the oracle) and real SentencePiece models.

Each builder trains a SentencePiece model in-process on a small random multilingual corpus, builds the
transformers tokenizer class of the family from it (with the class's full default language-code list), builds a
tiny randomly initialised model whose token ids follow the real checkpoints (<s>=0, <pad>=1, </s>=2, <unk>=3,
decoder_start = eos = 2), and writes everything with ``save_pretrained``, exactly as a transformers 5 user would.

The language codes are importable as ``M2M100_LANGS`` (bare codes; the tokens are ``__{code}__``), ``NLLB_LANGS``
and ``MBART50_LANGS``; they are the lists the tokenizer classes define by default.

transformers 5 quirks (checked with 5.23): M2M100Tokenizer only treats ``__xx__`` as special tokens when they are
passed as ``additional_special_tokens`` (as the Hub files do, and build_m2m100 does); built without them, decode keeps
"__fr__" in the text. Its decode renders ids past the tokenizer (the madeup-word rows) as a literal "<unk>", even
with ``skip_special_tokens=True``.
"""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from pathlib import Path

import sentencepiece as spm

from marian_fixtures import PUNCT, WORDS_DE, WORDS_EN

WORDS_FR = ("le renard brun rapide saute par-dessus chien paresseux maison rivière montagne petit grand vert ville "
            "train demain hier matin soir ami professeur demanda conseil grenouille eau pain café élève été où "
            "très bientôt français garçon naïf cœur").split()
WORDS_ES = ("el zorro marrón rápido salta sobre perro perezoso casa río montaña pequeño grande verde ciudad "
            "mañana ayer tarde amigo profesor preguntó consejo rana agua pan niño año ¿qué ¡hola señor").split()
WORDS_RU = ("быстрая коричневая лиса прыгает через ленивую собаку дом река гора маленький большой зелёный "
            "город поезд завтра вчера утро вечер друг учитель спросил совет лягушка вода хлеб кофе").split()
WORDS_EL = "καλημέρα φίλε νερό ψωμί σπίτι ποτάμι βουνό".split()
WORDS_MISC = ("42 3.14 1,000 2024 10:30 555-0199 100% €5 $20 #1 @home e-mail foo@example.com ß ø å æ ñ "
              "ﬁ ½ ① ｆｕｌｌ").split()  # the last ones are changed by SentencePiece's NFKC normalisation
ALL_WORDS = WORDS_EN + WORDS_DE + WORDS_FR + WORDS_ES + WORDS_RU + WORDS_EL + WORDS_MISC

# Characters no builder trains on: they come out as <unk>.
UNSEEN = "🙂漢字"

FAMILY_SENTENCES = [
    "Hello.",
    "The quick brown fox jumps over the lazy dog, and then it asks the teacher for advice tomorrow morning "
    "before the train leaves the city.",
    "Der Fuchs sprang über die Straße; das Mädchen lächelte: «très bien» — ça va?",
    "She said \u201chello\u201d and he replied \u2018goodbye\u2019\u2026",
    "  odd   spacing\there  \n and   a newline ",
    "The frog </s> drinks <unk> water <s> and <pad> bread.",
    "Say fra_Latn, __fr__ and fr_XX literally.",
    "x",
    "Ünïcödé çharacters ñ ø å ß € 42 3.14",
    "Быстрая коричневая лиса прыгает через ленивую собаку.",
    "¿Qué tal, señor? ¡Hola! El niño bebe agua; καλημέρα φίλε.",
    "Call 555-0199 at 10:30, or e-mail foo@example.com (100% urgent!!!)",
    "ｆｕｌｌ width, ligature ﬁ, ½ and ① are normalised",
    "Unseen characters 🙂 and 漢字 become unknown.",
]

# Offsets of the torch seed, picked so that seeds 0 and 1 give varied greedy and beam outputs (random tied models
# tend to repeat a token; how much depends on the draw).
_MODEL_SEED_OFFSET = {"m2m100": 3, "nllb": 5, "mbart50": 0}
SPECIAL_IDS = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}  # every family: bos, pad, eos (= decoder start), unk


def _lang_lists() -> tuple[list[str], list[str], list[str]]:
    from transformers.models.m2m_100.tokenization_m2m_100 import FAIRSEQ_LANGUAGE_CODES as m2m100
    from transformers.models.mbart50.tokenization_mbart50 import FAIRSEQ_LANGUAGE_CODES as mbart50
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES as nllb
    return list(m2m100["m2m100"]), list(nllb), list(mbart50)


# M2M100_LANGS: 100 bare codes ("fr"; the token is "__fr__", id len(vocab.json) + index);
# NLLB_LANGS: 202 codes ("fra_Latn"); MBART50_LANGS: 52 codes ("fr_XX"). Both are tokens with id spm size + 1 + index.
M2M100_LANGS, NLLB_LANGS, MBART50_LANGS = _lang_lists()


def _family_corpus(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    lines = []
    for _ in range(n):
        words = rng.choice([WORDS_EN, WORDS_DE, WORDS_FR, WORDS_ES, WORDS_RU, ALL_WORDS])
        tokens = []
        for _ in range(rng.randint(1, 14)):
            word = rng.choice(words)
            if rng.random() < 0.1:
                word = word.capitalize()
            if rng.random() < 0.2:
                word += rng.choice(PUNCT)
            if rng.random() < 0.05:
                word = str(rng.randint(0, 9999))
            tokens.append(word)
        lines.append(" ".join(tokens))
    seen = [s.translate({ord(c): None for c in UNSEEN}) for s in FAMILY_SENTENCES]
    return lines + seen


def _train_spm(lines: list[str], vocab_size: int, model_type: str, **options) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
                                   model_type=model_type, character_coverage=1.0, hard_vocab_limit=False,
                                   minloglevel=2, num_threads=1, **options)
    return model.getvalue()


def _randomize(model, seed: int, embed_std: float) -> None:
    """Perturb what the standard init leaves constant, so that greedy and beam outputs are varied.

    With tied embeddings, scale_embedding and large weights a random model mostly repeats one token; shrinking
    the (shared) embedding relative to the layers (the <pad> row stays zero) makes its outputs far more varied.
    """
    import torch

    generator = torch.Generator().manual_seed(seed + 1000)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "layer_norm" in name or "layernorm" in name:
                param.add_(torch.randn(param.shape, generator=generator) * 0.1)
            elif name.endswith("bias"):
                param.copy_(torch.randn(param.shape, generator=generator) * 0.1)
        model.get_input_embeddings().weight.mul_(embed_std / model.config.init_std)
        if hasattr(model, "final_logits_bias"):
            model.final_logits_bias.copy_(torch.randn(model.final_logits_bias.shape, generator=generator) * 0.5)


def _common_config(vocab_size: int, d_model: int) -> dict:
    return dict(
        vocab_size=vocab_size, d_model=d_model, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4,
        decoder_attention_heads=2, encoder_ffn_dim=2 * d_model, decoder_ffn_dim=3 * d_model,
        max_position_embeddings=128, scale_embedding=True, tie_word_embeddings=True, init_std=1.0,
        bos_token_id=0, pad_token_id=1, eos_token_id=2, decoder_start_token_id=2,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0)


def _remove(folder: Path) -> None:
    for file in folder.iterdir():
        file.unlink()
    folder.rmdir()


def _tokenizer_from_spm(cls, path: Path, codes: list[str], spm_bytes: bytes, **kwargs):
    """The transformers 5 way: ``from_pretrained`` on a folder holding only ``sentencepiece.bpe.model`` converts it.

    The language codes are passed explicitly (the spm conversion path otherwise drops NllbTokenizer's default list),
    and ``added_tokens_decoder`` pins the real checkpoints' order: the codes first, then <mask> as the last id.
    """
    from tokenizers import AddedToken

    scratch = path / "_spm_source"
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "sentencepiece.bpe.model").write_bytes(spm_bytes)
    base = spm.SentencePieceProcessor(model_proto=spm_bytes).GetPieceSize() + 1  # fairseq: + <pad>, ids shift by 1
    added = {base + i: AddedToken(code, special=True, normalized=False) for i, code in enumerate(codes)}
    added[base + len(codes)] = AddedToken("<mask>", special=True, normalized=True, lstrip=True)
    tokenizer = cls.from_pretrained(scratch, additional_special_tokens=list(codes), added_tokens_decoder=added,
                                    **kwargs)
    _remove(scratch)
    assert tokenizer.convert_tokens_to_ids(codes[0]) == base, "language codes not where the real checkpoints put them"
    assert tokenizer.convert_tokens_to_ids("<mask>") == base + len(codes) == len(tokenizer) - 1
    return tokenizer


def build_nllb(path: Path, seed: int = 0, legacy_behaviour: bool = False, d_model: int = 32,
               extra_rows: int = 2, ship_spm: bool = False) -> Path:
    """NLLB-200 layout: M2M100 model + NllbTokenizer (tokenizers BPE, tokenizer.json).

    ids: spm id + 1 for pieces, then the 202 language codes, then <mask>. As nllb-200 (256206 rows for 256204
    tokens) the embedding has ``extra_rows`` more rows than the tokenizer has tokens. ``ship_spm`` also leaves
    ``sentencepiece.bpe.model`` in the folder, as the Hub repositories have it (save_pretrained does not write it).
    """
    import torch
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    path.mkdir(parents=True, exist_ok=True)
    spm_bytes = _train_spm(_family_corpus(600, seed), 320, "bpe")
    tokenizer = _tokenizer_from_spm(NllbTokenizer, path, NLLB_LANGS, spm_bytes, legacy_behaviour=legacy_behaviour,
                                    src_lang="eng_Latn", model_max_length=128)
    tokenizer.save_pretrained(path)
    if ship_spm:
        (path / "sentencepiece.bpe.model").write_bytes(spm_bytes)

    torch.manual_seed(seed + _MODEL_SEED_OFFSET["nllb"])
    config = M2M100Config(activation_function="relu", tokenizer_class="NllbTokenizer",
                          **_common_config(len(tokenizer) + extra_rows, d_model))
    model = M2M100ForConditionalGeneration(config).eval()
    _randomize(model, seed, embed_std=0.2)
    model.generation_config = GenerationConfig(bos_token_id=0, pad_token_id=1, eos_token_id=2,
                                               decoder_start_token_id=2, max_length=200)
    model.save_pretrained(path)
    return path


def build_mbart50(path: Path, seed: int = 0, d_model: int = 32, ship_spm: bool = False,
                  activation: str = "relu") -> Path:
    """mBART-50 (many-to-many-mmt) layout: MBart model + MBart50Tokenizer (tokenizers Unigram, tokenizer.json).

    mBART-50's ``sentencepiece.bpe.model`` is in fact a unigram model (XLM-R's); ids: spm id + 1 for pieces, then
    the 52 language codes, then <mask>, all inside the Unigram vocabulary; the embedding has len(tokenizer) rows.
    ``ship_spm`` as in build_nllb. The fine-tuned mBART-50 translation checkpoints (mbart-large-50-*-mmt) use relu
    (transformers' conversion script sets it for them); the pretrained mbart-large-50 / cc25 use gelu.
    """
    import torch
    from transformers import GenerationConfig, MBart50Tokenizer, MBartConfig, MBartForConditionalGeneration

    path.mkdir(parents=True, exist_ok=True)
    spm_bytes = _train_spm(_family_corpus(600, seed + 1), 300, "unigram")
    # MBart50Tokenizer takes no bos_token argument; the Hub checkpoints set it (special_tokens_map.json).
    tokenizer = _tokenizer_from_spm(MBart50Tokenizer, path, MBART50_LANGS, spm_bytes, src_lang="en_XX",
                                    bos_token="<s>", model_max_length=128)
    tokenizer.save_pretrained(path)
    if ship_spm:
        (path / "sentencepiece.bpe.model").write_bytes(spm_bytes)

    torch.manual_seed(seed + _MODEL_SEED_OFFSET["mbart50"])
    config = MBartConfig(activation_function=activation, forced_eos_token_id=2, tokenizer_class="MBart50Tokenizer",
                         **_common_config(len(tokenizer), d_model))
    model = MBartForConditionalGeneration(config).eval()
    _randomize(model, seed, embed_std=0.2)
    # mbart-large-50 ships max_length 200 with 1024 learned positions; ours are 128 and past them MBart raises
    # IndexError (M2M100's sinusoidal positions grow instead), so the default stays within them.
    model.generation_config = GenerationConfig(bos_token_id=0, pad_token_id=1, eos_token_id=2,
                                               decoder_start_token_id=2, forced_eos_token_id=2,
                                               max_length=min(200, config.max_position_embeddings), num_beams=5,
                                               early_stopping=True)
    model.save_pretrained(path)
    return path


def build_m2m100(path: Path, seed: int = 0, d_model: int = 32, madeup_words: int = 8) -> Path:
    """M2M100 layout: M2M100 model + M2M100Tokenizer (sentencepiece.bpe.model + vocab.json, no tokenizer.json).

    vocab.json is fairseq's dictionary: <s>, <pad>, </s>, <unk>, then the pieces by decreasing frequency in the
    SentencePiece-encoded training corpus (pieces that never occur are left out and encode to <unk>), so its ids
    are not spm ids + an offset. The language tokens ``__xx__`` follow at len(vocab.json) + index in M2M100_LANGS
    (ids computed by the tokenizer class; the saved files only list the tokens, under ``extra_special_tokens``), and
    as m2m100_418M (128112 rows for 128104 tokens) the embedding has ``madeup_words`` more rows.
    """
    import torch
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration, M2M100Tokenizer

    path.mkdir(parents=True, exist_ok=True)
    corpus = _family_corpus(600, seed + 2)
    spm_bytes = _train_spm(corpus, 320, "bpe")
    sp = spm.SentencePieceProcessor(model_proto=spm_bytes)
    counts = Counter(piece for line in corpus for piece in sp.encode(line, out_type=str))
    pieces = sorted((p for p in counts if not sp.IsUnknown(sp.PieceToId(p))),
                    key=lambda p: (-counts[p], sp.PieceToId(p)))
    vocab = {tok: i for i, tok in enumerate(list(SPECIAL_IDS) + pieces)}
    scratch = path / "_spm_source"
    scratch.mkdir(parents=True, exist_ok=True)
    (scratch / "sentencepiece.bpe.model").write_bytes(spm_bytes)
    (scratch / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=2), encoding="utf-8")
    # The Hub checkpoints list the language tokens as additional special tokens (special_tokens_map.json and
    # tokenizer_config.json); without them transformers 5 would not treat __xx__ as special (nor skip it in decode).
    tokenizer = M2M100Tokenizer(vocab_file=str(scratch / "vocab.json"),
                                spm_file=str(scratch / "sentencepiece.bpe.model"), src_lang="en",
                                additional_special_tokens=[f"__{code}__" for code in M2M100_LANGS],
                                num_madeup_words=madeup_words, model_max_length=128)
    tokenizer.save_pretrained(path)
    _remove(scratch)

    torch.manual_seed(seed + _MODEL_SEED_OFFSET["m2m100"])
    n_tokens = len(vocab) + len(M2M100_LANGS)
    assert tokenizer.convert_tokens_to_ids(f"__{M2M100_LANGS[-1]}__") == n_tokens - 1 == len(tokenizer) - 1
    config = M2M100Config(activation_function="relu", **_common_config(n_tokens + madeup_words, d_model))
    model = M2M100ForConditionalGeneration(config).eval()
    _randomize(model, seed, embed_std=0.2)
    model.generation_config = GenerationConfig(bos_token_id=0, pad_token_id=1, eos_token_id=2,
                                               decoder_start_token_id=2, max_length=200, num_beams=5,
                                               early_stopping=True)
    model.save_pretrained(path)
    return path


BUILDERS = {"m2m100": build_m2m100, "nllb": build_nllb, "mbart50": build_mbart50}
