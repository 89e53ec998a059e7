"""The text layer between an API and the engine (pure Python, no torch): language detection, sentence
segmentation, markup and document files."""

from .detect import detect_language, detectable
from .prepared import PreparedText, PreparedTexts, prepare, translate_texts
from .files import SUFFIXES, read_file, written_as
from .markup import FORMATS, MarkupError, text_content
from .parsed import FileError, FileTooLarge, ParsedFile
from .segment import SPLIT_MODES, WordTooLong

__all__ = ["FORMATS", "SPLIT_MODES", "SUFFIXES", "PreparedText", "PreparedTexts", "FileError", "FileTooLarge",
           "MarkupError", "ParsedFile", "WordTooLong", "detect_language", "detectable", "prepare", "read_file",
           "text_content", "translate_texts", "written_as"]
