"""Encoder-decoder Transformers for translation and text-to-text generation: the package surface.

    bundle = model.load(path, device="cpu", dtype="float32")   # any supported family, by config.json
    Translator(bundle).translate(["Hello."], target_lang="fr")

Everything outside model/ (the server, the benchmarks) enters through the names below.
"""

from .alignment import AlignmentInput, word_alignments
from .architecture import ModelConfig
from .batch_decoder import BatchDecoder, Encoded, StepEvent
from .bundle import ModelBundle, Source, demo_model_dir, load
from .cpu_memory import keep_freed_memory
from .dtypes import native_bfloat16, resolve_dtype, resolve_placement
from .errors import CheckpointError
from .glossary import Glossary, UnspellableTerm, check_terms, term_ids, with_glossary
from .hub import is_repo_id
from .languages import UnsupportedLanguage, iso_code, match_language
from .search import DecodeParams, Hypothesis, new_tokens_within
from .text import (FORMATS, SPLIT_MODES, SUFFIXES, Document, Documents, FileError, FileTooLarge, MarkupError,
                   ParsedFile, WordTooLong, detect_language, detectable, prepare, read_file, text_content, written_as)
from .transformer import Seq2SeqTransformer
from .translator import Translation, Translator

__all__ = ["FORMATS", "SPLIT_MODES", "SUFFIXES", "AlignmentInput", "BatchDecoder", "CheckpointError", "DecodeParams",
           "Document", "Documents", "Encoded", "FileError", "FileTooLarge", "Glossary", "Hypothesis", "MarkupError",
           "ModelBundle", "ModelConfig", "ParsedFile", "Seq2SeqTransformer", "Source", "StepEvent", "Translation",
           "Translator", "UnspellableTerm", "UnsupportedLanguage", "WordTooLong", "check_terms", "demo_model_dir",
           "detect_language", "detectable", "is_repo_id", "iso_code", "keep_freed_memory", "load", "match_language",
           "native_bfloat16", "new_tokens_within", "prepare", "read_file", "resolve_dtype", "resolve_placement",
           "term_ids", "with_glossary", "text_content", "word_alignments",
           "written_as"]
