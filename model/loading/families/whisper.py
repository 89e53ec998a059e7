"""Whisper and distil-Whisper (model_type whisper): speech in. The encoder takes log-mel features through two
convolutions (network.audio_front) and the sinusoids the checkpoint stores as weights; pre-norm layers with final
norms, GELU, no embedding scale, key projections without a bias, learned decoder positions from 0, the output tied
to the decoder embeddings (proj_out).

Tokenizer: GPT-2's byte-level BPE (tokenizer.json, or vocab.json + merges.txt + added_tokens.json) with the special
tokens after the text ones: <|endoftext|>, <|startoftranscript|>, the languages, <|translate|>, <|transcribe|>,
<|startoflm|>, <|startofprev|>, <|nocaptions|> (<|nospeech|> in newer checkpoints), <|notimestamps|> and the
timestamps <|0.00|>..<|30.00|>.
generation_config.json names them (lang_to_id, task_to_id, no_timestamps_token_id) with the rules
transformers' generate applies (suppress_tokens, begin_suppress_tokens, max_initial_timestamp_index): SpeechTokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ...errors import CheckpointError
from ...network.architecture import Architecture, ModelConfig, Positions
from ..config import config_reader, first_id, read_json
from . import layout
from .base import Family, Languages, PiecesTokenizer, TokenizerJson, read_tokenizer_config
from .bart import byte_level_bpe
from .layout import ZEROS, Parts, add_parts

# transformers' WhisperConfig defaults, for keys a config.json leaves out.
DEFAULTS = dict(vocab_size=51865, num_mel_bins=80, encoder_layers=4, decoder_layers=4, encoder_attention_heads=6,
                decoder_attention_heads=6, encoder_ffn_dim=1536, decoder_ffn_dim=1536, d_model=384,
                activation_function="gelu", max_source_positions=1500, max_target_positions=448,
                pad_token_id=50257, eos_token_id=50257, decoder_start_token_id=50258, scale_embedding=False)


def model_config(raw: dict, source: str) -> ModelConfig:
    get = config_reader(raw, DEFAULTS, source)
    architecture = Architecture(positions=Positions.AUDIO, pre_norm=True, final_norms=True,
                                scale_embedding=bool(get("scale_embedding")), activation=get("activation_function"))
    vocab = get("vocab_size")
    return ModelConfig(
        architecture=architecture, vocab_size=vocab, target_vocab_size=vocab, d_model=get("d_model"),
        encoder_layers=get("encoder_layers"), decoder_layers=get("decoder_layers"),
        encoder_attention_heads=get("encoder_attention_heads"),
        decoder_attention_heads=get("decoder_attention_heads"), encoder_ffn_dim=get("encoder_ffn_dim"),
        decoder_ffn_dim=get("decoder_ffn_dim"), max_position_embeddings=get("max_target_positions"),
        shared_embeddings=True, tie_word_embeddings=True, pad_token_id=get("pad_token_id"),
        eos_token_id=first_id(get("eos_token_id")), decoder_start_token_id=get("decoder_start_token_id"),
        num_mel_bins=get("num_mel_bins"), max_source_positions=get("max_source_positions"))


def key_map(config: ModelConfig) -> dict[str, Parts]:
    """The shared layout's layers and norms, with Whisper's differences: no key bias (zeros), the audio front,
    the decoder's positions, the decoder embeddings as the only ones (proj_out tied to them)."""
    out = layout.key_map(config)
    for side, n_layers in (("encoder", config.encoder_layers), ("decoder", config.decoder_layers)):
        for i in range(n_layers):
            theirs = f"model.{side}.layers.{i}"
            out[f"{side}_layers.{i}.self_attn.qkv_proj.bias"] = (
                (f"{theirs}.self_attn.q_proj.bias",), ZEROS, (f"{theirs}.self_attn.v_proj.bias",))
            if side == "decoder":
                out[f"{side}_layers.{i}.encoder_attn.kv_proj.bias"] = (ZEROS, (f"{theirs}.encoder_attn.v_proj.bias",))
    add_parts(out, "audio_front.conv1", ["model.encoder.conv1"], ("weight", "bias"))
    add_parts(out, "audio_front.conv2", ["model.encoder.conv2"], ("weight", "bias"))
    out["audio_front.positions"] = (("model.encoder.embed_positions.weight",),)
    out["decoder_positions.weight"] = (("model.decoder.embed_positions.weight",),)
    out["encoder_embed.weight"] = (("model.decoder.embed_tokens.weight", "proj_out.weight"),)
    return out


def ignored_keys(config: ModelConfig) -> tuple[str, ...]:
    return ()


@dataclass(frozen=True)
class SpeechTokens:
    """The special tokens and rules of Whisper's decoding, from generation_config.json and the tokenizer."""

    start: int  # <|startoftranscript|>
    previous: int | None  # <|startofprev|>: the marker of a prompt, or of the previous windows' text
    no_speech: int | None  # <|nospeech|> (<|nocaptions|> in older checkpoints): its probability says "silence"
    end: int  # <|endoftext|>
    languages: dict[str, int]  # code (en, de) → its token, in the checkpoint's order; {} for an English-only model
    tasks: dict[str, int]  # transcribe, translate → its token
    no_timestamps: int
    suppress: tuple[int, ...]
    suppress_at_begin: tuple[int, ...]
    max_initial_timestamp: int | None
    max_target_positions: int
    alignment_heads: tuple[tuple[int, int], ...]  # (decoder layer, head) whose cross-attention times the words

    @property
    def first_timestamp(self) -> int:
        return self.no_timestamps + 1

    @property
    def multilingual(self) -> bool:
        return bool(self.languages)


def read_speech_tokens(model_dir: Path, pieces: TokenizerJson, config: dict) -> SpeechTokens:
    path = model_dir / "generation_config.json"
    gen = read_json(path)
    for key in ("no_timestamps_token_id", "decoder_start_token_id"):
        if gen.get(key) is None:
            raise CheckpointError(f"{path}: missing key {key!r} (Whisper's generate needs it)")
    multilingual = gen.get("is_multilingual", bool(gen.get("lang_to_id")))
    languages = {token.strip("<|>"): i for token, i in (gen.get("lang_to_id") or {}).items()} if multilingual else {}
    return SpeechTokens(
        start=gen["decoder_start_token_id"], previous=pieces.token_id("<|startofprev|>"),
        no_speech=next((i for i in map(pieces.token_id, ("<|nospeech|>", "<|nocaptions|>")) if i is not None), None),
        end=first_id(gen.get("eos_token_id", config.get("eos_token_id", DEFAULTS["eos_token_id"]))),
        languages=languages, tasks=dict(gen.get("task_to_id") or {}), no_timestamps=gen["no_timestamps_token_id"],
        suppress=tuple(gen.get("suppress_tokens") or ()),
        suppress_at_begin=tuple(gen.get("begin_suppress_tokens") or ()),
        max_initial_timestamp=gen.get("max_initial_timestamp_index"),
        max_target_positions=config.get("max_target_positions", DEFAULTS["max_target_positions"]),
        alignment_heads=alignment_heads(gen.get("alignment_heads"), config, path))


def alignment_heads(listed: list | None, config: dict, path: Path) -> tuple[tuple[int, int], ...]:
    """generation_config.json's alignment_heads ([layer, head] pairs), checked against the decoder's size. Absent
    (a fine-tuned checkpoint often drops them): every head of the decoder's last half of layers, openai-whisper's
    default (transformers refuses token timestamps instead)."""
    layers = config.get("decoder_layers", DEFAULTS["decoder_layers"])
    heads = config.get("decoder_attention_heads", DEFAULTS["decoder_attention_heads"])
    if listed is None:
        return tuple((layer, head) for layer in range(layers // 2, layers) for head in range(heads))
    pairs = tuple(tuple(pair) for pair in listed)
    wrong = next((p for p in pairs if len(p) != 2 or not (0 <= p[0] < layers and 0 <= p[1] < heads)), None)
    if wrong is not None or not pairs:
        raise CheckpointError(f"{path}: alignment_heads {listed!r}: expected [layer, head] pairs within the "
                              f"decoder's {layers} layers of {heads} heads")
    return pairs


class WhisperTokenizer(PiecesTokenizer):
    """Text ↔ ids for Whisper's prompts and transcripts; `speech` holds its decoding's tokens and rules."""

    def __init__(self, pieces: TokenizerJson, speech: SpeechTokens):
        self.pieces, self.speech = pieces, speech
        self.eos_id = self.pad_id = speech.end
        self.languages = Languages(source=tuple(speech.languages), target=tuple(speech.languages))

    def encode(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> list[int]:
        """A prompt's text as transformers' get_prompt_ids spells it (after <|startofprev|>): a leading space."""
        return self.pieces.encode(" " + text.strip())

    def forced_bos(self, target_lang: str | None) -> int | None:
        return None

    def decode(self, token_ids: list[int]) -> str:
        """Text tokens only: every special token and timestamp comes after <|endoftext|>."""
        return self.pieces.decode([i for i in token_ids if i < self.speech.end])


def load_tokenizer(model_dir: Path) -> WhisperTokenizer:
    if (model_dir / "tokenizer.json").exists():
        pieces = TokenizerJson.read(model_dir / "tokenizer.json")
    else:
        added_path = model_dir / "added_tokens.json"
        added = read_json(added_path) if added_path.exists() else {}
        pieces = byte_level_bpe(model_dir, read_tokenizer_config(model_dir), sorted(added, key=added.get))
        wrong = next((t for t, i in added.items() if pieces.token_id(t) != i), None)
        if wrong is not None:
            raise CheckpointError(f"{added_path}: {wrong!r} is {added[wrong]}, but follows the vocabulary at "
                                  f"{pieces.token_id(wrong)}")
    return WhisperTokenizer(pieces, read_speech_tokens(model_dir, pieces, read_json(model_dir / "config.json")))


FAMILY = Family(name="whisper", model_config=model_config, key_map=key_map, ignored_keys=ignored_keys,
                load_tokenizer=load_tokenizer)
