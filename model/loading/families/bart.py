"""BART (model_type bart; bart-large, bart-large-cnn, distilbart): post-norm, learned positions with offset 2, an
embedding LayerNorm, GELU, tied output with final_logits_bias.

Tokenizer: byte-level BPE through the `tokenizers` library (tokenizer.json, or vocab.json + merges.txt built the
way transformers converts them); source `<s> X </s>`; the decoder starts from </s>, and bart-large-cnn forces
`<s>` first (forced_bos_token_id in its config). A text-to-text model: no languages.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

from ...errors import CheckpointError
from ...network.architecture import Architecture, ModelConfig, Positions
from . import layout
from .base import Family, Languages, PiecesTokenizer, TokenizerJson, read_tokenizer_config

# transformers' BartConfig defaults, for keys a config.json leaves out.
DEFAULTS = dict(vocab_size=50265, max_position_embeddings=1024, encoder_layers=12, decoder_layers=12,
                encoder_ffn_dim=4096, decoder_ffn_dim=4096, encoder_attention_heads=16, decoder_attention_heads=16,
                activation_function="gelu", d_model=1024, scale_embedding=False, pad_token_id=1, eos_token_id=2,
                decoder_start_token_id=2, forced_eos_token_id=2, tie_word_embeddings=True)
SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<mask>")


def model_config(raw: dict, source: str) -> ModelConfig:
    architecture = Architecture(positions=Positions.LEARNED, embedding_norm=True,
                                scale_embedding=bool(raw.get("scale_embedding", DEFAULTS["scale_embedding"])),
                                activation=raw.get("activation_function", DEFAULTS["activation_function"]),
                                output_bias=True)
    return layout.model_config(raw, source, DEFAULTS, architecture, shared_embeddings=True)


def byte_level_bpe(model_dir: Path, tok_config: dict, special_tokens=SPECIAL_TOKENS) -> TokenizerJson:
    """vocab.json + merges.txt as a `tokenizers` byte-level BPE with the special tokens added (in order, after the
    vocabulary), as transformers builds RobertaTokenizer (BartTokenizer) from them."""
    vocab, merges = model_dir / "vocab.json", model_dir / "merges.txt"
    for path in (vocab, merges):
        if not path.exists():
            raise CheckpointError(f"{path}: file not found (and no tokenizer.json)")
    prefix_space = bool(tok_config.get("add_prefix_space", False))
    tokenizer = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=prefix_space)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(t, special=True, lstrip=t == "<mask>") for t in special_tokens])
    return TokenizerJson(tokenizer)


class BartTokenizer(PiecesTokenizer):
    def __init__(self, pieces: TokenizerJson):
        self.pieces = pieces
        self.bos_id, self.eos_id, self.pad_id = (pieces.token_id(t) for t in ("<s>", "</s>", "<pad>"))
        if None in (self.bos_id, self.eos_id, self.pad_id):
            raise CheckpointError("tokenizer: missing <s>, </s> or <pad>")
        self.languages = Languages()

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]:
        return [self.bos_id] + self.pieces.encode(text) + [self.eos_id]

    def forced_bos(self, target_lang: str | None) -> int | None:
        return None


def load_tokenizer(model_dir: Path) -> BartTokenizer:
    if (model_dir / "tokenizer.json").exists():
        return BartTokenizer(TokenizerJson.read(model_dir / "tokenizer.json"))
    return BartTokenizer(byte_level_bpe(model_dir, read_tokenizer_config(model_dir)))


FAMILY = Family(name="bart", model_config=model_config, key_map=layout.key_map, ignored_keys=layout.ignored_keys,
                load_tokenizer=load_tokenizer)
