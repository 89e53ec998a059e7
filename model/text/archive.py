"""The zip container of the office, OpenDocument and e-book formats, checked before anything reads it.

The zip directory is read before any entry is inflated: entries whose uncompressed sizes add up past
`max_expanded_bytes`, or any entry inflating more than `max_ratio` times its compressed size, make the file too
large (FileTooLarge); entry names with `..` or a leading `/` make it damaged (FileError). zipfile stops an entry at
the size its directory gives, so a lying header cannot inflate further. Then every entry is read (within those bytes)
and one that declares XML entities is refused: entity expansion would make text the limits never saw (billion
laughs), whichever XML parser a format's library uses.
"""

from __future__ import annotations

import io
import re
import zipfile

from .parsed import FileError, FileTooLarge

_ENTITY = re.compile(rb"<!ENTITY|<!DOCTYPE[^>]*\[")


def open_archive(data: bytes, suffix: str, max_expanded_bytes: int, max_ratio: int) -> zipfile.ZipFile:
    """The checked archive of a `suffix` file (the suffix names the format in messages)."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as e:
        raise FileError(f"not a valid {suffix} file: {e}") from None
    for entry in entries:
        if entry.filename.startswith("/") or ".." in entry.filename.replace("\\", "/").split("/"):
            raise FileError(f"not a valid {suffix} file: entry name {entry.filename!r} leaves the archive")
        if entry.file_size > max_ratio * max(entry.compress_size, 1):
            raise FileTooLarge(f"the {suffix} entry {entry.filename!r} inflates {entry.file_size} bytes from "
                               f"{entry.compress_size}; at most {max_ratio} times", limit=max_ratio)
    expanded = sum(entry.file_size for entry in entries)
    if expanded > max_expanded_bytes:
        raise FileTooLarge(f"the {suffix} file inflates to {expanded} bytes; at most {max_expanded_bytes}",
                           limit=max_expanded_bytes)
    for entry in entries:
        if declares_entities(read_entry(archive, entry.filename, suffix)):
            raise FileError(f"not a valid {suffix} file: {entry.filename} carries a DTD (<!DOCTYPE [...]> or "
                            f"<!ENTITY>)")
    return archive


def read_entry(archive: zipfile.ZipFile, name: str, suffix: str) -> bytes:
    try:
        return archive.read(name)
    except (KeyError, zipfile.BadZipFile, ValueError, OSError, EOFError, NotImplementedError) as e:
        raise FileError(f"not a valid {suffix} file: {name}: {e}") from None


def declares_entities(data: bytes) -> bool:
    """Whether XML declares entities (a DOCTYPE's internal subset, or <!ENTITY>): refused before any parser reads it."""
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # UTF-16 XML: its declarations are not ASCII bytes
        data = data.decode("utf-16", errors="replace").encode()
    return bool(_ENTITY.search(data))


def rewrite(archive: zipfile.ZipFile, replaced: dict[str, bytes]) -> bytes:
    """The archive with the entries named in `replaced` written anew, every other copied; each keeps its place and
    its compression (an OpenDocument's or EPUB's `mimetype` stays first and stored)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as written:
        for entry in archive.infolist():
            written.writestr(entry, replaced.get(entry.filename, archive.read(entry.filename)))
    return out.getvalue()
