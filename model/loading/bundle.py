"""The door into model/: load(path) reads config.json's model_type and returns a family-neutral ModelBundle.

A bundle holds the network (encode, cross_kv, new_cache, decode_step, and the teacher-forced forward oracle),
the tokenizer with its language policy, and the generation defaults. Everything above it (the Translator,
the server) works the same for every family.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Sequence

import torch

from ..decoding.search import DecodeParams
from ..decoding.source import Source
from ..errors import CheckpointError
from ..kernels.cpu_memory import keep_freed_memory
from ..kernels.dtypes import DTYPES, resolve_dtype
from ..kernels.traced_step import trace_stacks
from ..network.architecture import ModelConfig
from ..network.transformer import Seq2SeqTransformer
from ..text.languages import ConflictingTarget, UnsupportedLanguage, match_language
from . import hub
from .checkpoint import load_network
from .config import read_json
from .families import Family, Languages, Tokenizer, family_for
from .generation import read_generation_defaults

SAMPLING_KNOBS = ("temperature", "top_k", "top_p", "seed")


def demo_model_dir(speech: bool = False) -> Path:
    """An embedded demo checkpoint shipped inside the package: the text demo (English number words into four
    languages), or the speech demo (spoken English numbers into the text demo's source words)."""
    path = Path(__file__).parents[1] / "demo" / ("speech_checkpoint" if speech else "checkpoint")
    if not (path / "config.json").exists():
        raise CheckpointError(f"{path}: the embedded demo model is missing; pass a model directory")
    return path


@dataclass
class ModelBundle:
    name: str
    family: str
    config: ModelConfig
    network: Seq2SeqTransformer | None  # None when loaded without weights
    tokenizer: Tokenizer
    generation: DecodeParams  # the checkpoint's generation defaults
    normalize: Callable[[str], str] | None = None  # Moses punctuation normalization, opt-in
    chat_template: str | None = None  # tokenizer_config.json's Jinja template of a conversation, if it has one
    dtype: str = "float32"  # the number format the weights run in (model.kernels.dtypes; `auto` resolved)

    @property
    def languages(self) -> Languages:
        return self.tokenizer.languages

    @property
    def max_positions(self) -> int:
        return self.config.max_position_embeddings

    def resolve_languages(self, source_lang: str | None, target_lang: str | None, translating: bool = True,
                          texts: Sequence[str] = ()) -> tuple[str | None, str | None]:
        """User codes (ISO 639-1/639-3, BCP-47, the model's own) → the model's codes; a missing one takes the
        model's default. A translation into a model whose target is a forced token must name the target, in
        target_lang or at the start of each of its `texts` (text_target; free generation need not). Raises
        UnsupportedLanguage naming the field and the supported codes."""
        langs = self.languages
        if (translating and target_lang is None and langs.target_required and langs.default_target is None
                and self.generation.forced_bos_token_id is None
                and not (texts and all(langs.split_named_target(t)[0] for t in texts if t.strip()))):
            raise UnsupportedLanguage("target_lang", None, langs.target)
        source = langs.default_source if source_lang is None else (
            match_language(source_lang, langs.source, "source_lang") if langs.source else source_lang)
        target = langs.default_target if target_lang is None else match_language(target_lang, langs.target,
                                                                                  "target_lang")
        return source, target

    def text_target(self, text: str, target_lang: str | None) -> tuple[str, str | None]:
        """`text` without the target it names at its start (MADLAD's "<2pt> I love pizza!", an OPUS-MT
        multi-target model's ">>fra<< ..."), and its target: the one it names, else `target_lang` (resolved
        codes). ConflictingTarget when it names one and target_lang another."""
        named, rest = self.languages.split_named_target(text)
        if named is None:
            return text, target_lang
        if target_lang is not None and target_lang != named:
            raise ConflictingTarget(target_lang, named)
        return rest, named

    def text_source(self, text: str, source_lang: str | None, target_lang: str | None) -> Source:
        """A whole text (not cut into sentences) for the engine, its own target first (text_target)."""
        text, target = self.text_target(text, target_lang)
        return self.source(text, source_lang, target)

    def source(self, text: str, source_lang: str | None = None, target_lang: str | None = None) -> Source:
        """`text` for resolved (model) codes → encoder ids and the forced first token."""
        if self.normalize is not None and text:
            text = self.normalize(text)
        forced = self.tokenizer.forced_bos(target_lang)
        return Source(self.tokenizer.encode(text, source_lang, target_lang),
                      self.generation.forced_bos_token_id if forced is None else forced)

    def decode(self, token_ids: list[int]) -> str:
        return self.tokenizer.decode(token_ids)

    def samples(self, choices: dict) -> bool:
        """Whether decoding with `choices` samples: any sampling knob chosen asks for it, else the model's
        default does."""
        return choices.get("do_sample", False) or any(choices.get(k) is not None for k in SAMPLING_KNOBS) \
            or self.generation.do_sample

    def decode_params(self, **choices) -> DecodeParams:
        """The model's generation defaults with the caller's choices (DecodeParams fields; None = the default)
        over them. Sampling runs one beam unless the caller chose beams (DecodeParams then refuses)."""
        choices = {k: v for k, v in choices.items() if v is not None}
        sampling = self.samples(choices)
        choices.pop("do_sample", None)
        beams = choices.pop("num_beams", None) or (1 if sampling else self.generation.num_beams)
        return replace(self.generation, **choices, do_sample=sampling, num_beams=beams)


def _read_model_config(model_dir: Path) -> tuple[Family, ModelConfig]:
    """(family, ModelConfig) of a checkpoint directory, without reading weights."""
    config_path = model_dir / "config.json"
    raw = read_json(config_path)
    family = family_for(raw.get("model_type"), config_path)
    return family, family.model_config(raw, str(config_path))


def load(path: str | Path | None = None, device: str = "cpu", dtype: str = "float32",
         normalize_punctuation: bool = False, weights: bool = True, pack_tied_output: bool = True,
         traced: bool = True) -> ModelBundle:
    """A checkpoint directory or a Hub repo id (model.loading.hub; None: the embedded demo model) → ModelBundle.
    weights=False loads only the tokenizer and configs (network None), to describe a model without its memory.
    pack_tied_output (float32 and bfloat16 on the CPU): an output projection tied to the embeddings multiplies by a
    packed copy of them (faster steps, one more vocabulary × d_model matrix in memory).
    traced (on the CPU): the encoder and decoder steps run traced (kernels.traced_step). dtype: kernels.dtypes
    (`auto` picks for the device)."""
    model_dir = hub.model_dir(path) if path is not None else demo_model_dir()
    dtype = resolve_dtype(dtype, device)
    family, config = _read_model_config(model_dir)
    generation = read_generation_defaults(model_dir, config)
    tokenizer = family.load_tokenizer(model_dir)
    network = None
    if weights:
        network = load_network(model_dir, config, family.key_map, family.ignored_keys(config), device=device,
                               dtype=DTYPES.get(dtype, torch.float32),  # int8: quantized from float32
                               pack_tied_output=pack_tied_output, int8=dtype == "int8")
        if network.device.type == "cpu":
            keep_freed_memory()
            if traced:
                trace_stacks(network)
    normalize = None
    if normalize_punctuation:
        from sacremoses import MosesPunctNormalizer
        normalize = MosesPunctNormalizer(tokenizer.languages.default_source or "en").normalize
    name = str(path) if hub.is_repo_id(path) and model_dir != Path(path) else model_dir.name
    return ModelBundle(name, family.name, config, network, tokenizer, generation, normalize,
                       read_chat_template(model_dir), dtype)


def read_chat_template(model_dir: Path) -> str | None:
    """tokenizer_config.json's `chat_template`: a template, or a list of named ones (the one named "default")."""
    path = model_dir / "tokenizer_config.json"
    template = read_json(path).get("chat_template") if path.exists() else None
    if isinstance(template, list):
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"),
                        None)
    return template if isinstance(template, str) else None
