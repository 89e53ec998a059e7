"""The text layer between an API and the engine (pure Python, no torch): language detection, sentence
segmentation, markup and document files."""

from .detect import detect_language, detectable

__all__ = ["detect_language", "detectable"]
