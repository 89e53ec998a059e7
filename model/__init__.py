"""Encoder-decoder Transformers for translation, text-to-text generation and speech: the package surface.

    bundle = model.load(path, device="cpu", dtype="float32")   # any supported family, by config.json
    Translator(bundle).translate(["Hello."], target_lang="fr")

Everything outside model/ (the server, the benchmarks) enters through the names below. Its folders by job, each
importing only those before it: text/ (languages, detection, segmentation, files: pure Python), audio/ (audio files
decoded without torch, log-mel features), network/ (the Transformer), kernels/ (CPU and GPU tuning, number formats),
decoding/ (searches, the batch decoder), loading/ (checkpoints, the Hub, one module per family); above them the uses
of a loaded model (translator, speech, glossary, alignment, the command line). Names are imported when first used, so
a process that needs only the text layer never imports torch.
"""

import importlib

_HOMES = {
    ".alignment": ["AlignmentInput", "word_alignments"],
    ".audio.decode": ["AUDIO_FORMATS", "AUDIO_SUFFIXES", "SAMPLE_RATE", "read_audio"],
    ".decoding.batch_decoder": ["BatchDecoder", "Encoded", "StepEvent"],
    ".glossary": ["Glossary", "UnspellableTerm", "check_terms", "term_ids", "with_glossary"],
    ".decoding.search": ["DecodeParams", "Hypothesis", "new_tokens_within"],
    ".decoding.source": ["Source"],
    ".errors": ["AudioTooLarge", "AudioTooLong", "BadAudio", "CheckpointError"],
    ".kernels.cpu_memory": ["keep_freed_memory"],
    ".kernels.dtypes": ["kernels_for", "resolve_dtype", "resolve_placement"],
    ".kernels.isa": ["instruction_sets"],
    ".loading.bundle": ["ModelBundle", "demo_model_dir", "load"],
    ".loading.hub": ["is_repo_id"],
    ".text.languages": ["UnsupportedLanguage", "iso_code", "match_language"],
    ".network.architecture": ["ModelConfig"],
    ".network.transformer": ["Seq2SeqTransformer"],
    ".text": ["FORMATS", "SPLIT_MODES", "SUFFIXES", "PreparedText", "PreparedTexts", "FileError", "FileTooLarge",
              "MarkupError", "ParsedFile", "WordTooLong", "detect_language", "detectable", "prepare", "read_file",
              "text_content", "written_as"],
    ".translator": ["Translation", "Translator"],
    ".speech": ["Segment", "SpeechOptions", "SpeechWindows", "Transcriber", "Transcript", "compression_ratio"],
    ".speech_words": ["Word"],
}
_HOME_OF = {name: module for module, names in _HOMES.items() for name in names}
__all__ = sorted(_HOME_OF)


def __getattr__(name: str):
    if name not in _HOME_OF:
        raise AttributeError(f"module 'model' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOME_OF[name], __name__), name)
    globals()[name] = value  # imported once: later lookups find it without this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
