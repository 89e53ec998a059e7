"""The text layer between an API and the engine (pure Python, no torch): language detection, sentence
segmentation, markup and document files."""

from .detect import detect_language, detectable
from .document import Document, prepare
from .markup import FORMATS, MarkupError, text_content
from .segment import SPLIT_MODES

__all__ = ["FORMATS", "SPLIT_MODES", "Document", "MarkupError", "detect_language", "detectable", "prepare",
           "text_content"]
