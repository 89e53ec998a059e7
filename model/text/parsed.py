"""What reading a document file gives (its texts, and how to write the file back from their translations), or fails
with."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class FileError(ValueError):
    """A file that is damaged or of a kind not supported."""


class FileTooLarge(FileError):
    """A file whose contents would inflate past a limit (`limit`, in the unit the message names)."""

    def __init__(self, message: str, limit: int):
        super().__init__(message)
        self.limit = limit


@dataclass
class ParsedFile:
    texts: list[str]
    format: str  # how the texts are to be read: "text", "html", "xml"
    write: Callable[[list[str]], bytes]  # translated texts → the translated file
    characters: int  # what a reader sees, what is translated (and billed): no tags, no run markup
    non_splitting_tags: tuple[str, ...] = ()
    ignore_tags: tuple[str, ...] = ()  # elements whose contents are not text to translate


def reading(suffix: str, read: Callable, *args):
    """`read(*args)`, a library's reading (or writing back) of a file: any error it meets (a damaged file, well-formed
    XML of the wrong structure) is the file's FileError naming the format."""
    try:
        return read(*args)
    except FileError:
        raise
    except Exception as e:  # noqa: BLE001 - whatever the library's code meets in a hostile file
        raise FileError(f"not a valid {suffix} file: {e or type(e).__name__}") from None
