"""Office Open XML files read and written with their maintained libraries: `.docx` (python-docx) one text per
paragraph, body then table cells; `.pptx` (python-pptx) one text per paragraph of every slide's text frames, tables
and notes; both with their runs as inline elements (runs.py). `.xlsx` (openpyxl) one plain text per text cell: numbers,
formulas and dates are never touched.

Each archive is checked (archive.open_archive) before its library opens it; whatever the library meets reading it is
the file's FileError (parsed.reading).
"""

from __future__ import annotations

import io
from typing import Iterable

from .archive import open_archive
from .parsed import ParsedFile, reading
from .runs import RUN, run_texts, runs_text


def _saved(document) -> bytes:
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def _paragraphs_file(document, paragraphs: list, suffix: str) -> ParsedFile:
    """One XML text per paragraph with runs, its runs as inline elements; written back run by run."""
    run_lists = reading(suffix, lambda: [list(p.runs) for p in paragraphs])
    texts = reading(suffix, lambda: [[run.text for run in runs] for runs in run_lists])
    kept = [(runs, its) for runs, its in zip(run_lists, texts) if runs]

    def write(translations: list[str]) -> bytes:
        for (runs, _), translated in zip(kept, translations):
            for run, text in zip(runs, run_texts(translated, len(runs))):
                run.text = text
        return _saved(document)

    return ParsedFile([runs_text(its) for _, its in kept], "xml", lambda t: reading(suffix, write, t),
                      non_splitting_tags=(RUN,),
                      characters=sum(len(text) for _, its in kept for text in its))


def docx(data: bytes, suffix: str, max_expanded_bytes: int, max_ratio: int) -> ParsedFile:
    import docx as python_docx  # python-docx: only this format needs it

    open_archive(data, suffix, max_expanded_bytes, max_ratio)
    document = reading(suffix, python_docx.Document, io.BytesIO(data))
    return _paragraphs_file(document, reading(suffix, lambda: list(_docx_paragraphs(document))), suffix)


def _docx_paragraphs(document) -> Iterable:
    """Body paragraphs, then those in table cells (each cell once, though merged cells repeat)."""
    yield from document.paragraphs
    seen = set()
    for table in document.tables:
        for row in table.rows:
            for cell in row.cells:
                if id(cell._tc) not in seen:
                    seen.add(id(cell._tc))
                    yield from cell.paragraphs


def pptx(data: bytes, suffix: str, max_expanded_bytes: int, max_ratio: int) -> ParsedFile:
    import pptx as python_pptx  # python-pptx: only this format needs it

    open_archive(data, suffix, max_expanded_bytes, max_ratio)
    presentation = reading(suffix, python_pptx.Presentation, io.BytesIO(data))
    return _paragraphs_file(presentation, reading(suffix, lambda: list(_pptx_paragraphs(presentation))), suffix)


def _pptx_paragraphs(presentation) -> Iterable:
    """Each slide's shapes in order (inside groups too): text frames' paragraphs, tables' cells'; then its notes."""
    for slide in presentation.slides:
        yield from _shape_paragraphs(slide.shapes)
        if slide.has_notes_slide and slide.notes_slide.notes_text_frame is not None:
            yield from slide.notes_slide.notes_text_frame.paragraphs


def _shape_paragraphs(shapes) -> Iterable:
    from pptx.enum.shapes import MSO_SHAPE_TYPE

    for shape in shapes:
        if shape.shape_type == MSO_SHAPE_TYPE.GROUP:
            yield from _shape_paragraphs(shape.shapes)
        elif getattr(shape, "has_table", False) and shape.has_table:
            for row in shape.table.rows:
                for cell in row.cells:
                    if not cell.is_spanned:
                        yield from cell.text_frame.paragraphs
        elif shape.has_text_frame:
            yield from shape.text_frame.paragraphs


def xlsx(data: bytes, suffix: str, max_expanded_bytes: int, max_ratio: int) -> ParsedFile:
    import openpyxl  # only this format needs it

    open_archive(data, suffix, max_expanded_bytes, max_ratio)
    workbook = reading(suffix, openpyxl.load_workbook, io.BytesIO(data))
    cells = reading(suffix, lambda: [cell for sheet in workbook.worksheets for row in sheet.iter_rows()
                                      for cell in row if cell.data_type == "s" and cell.value])

    def write(translations: list[str]) -> bytes:
        for cell, translated in zip(cells, translations):
            cell.value = translated
        return _saved(workbook)

    texts = [str(cell.value) for cell in cells]
    return ParsedFile(texts, "text", lambda t: reading(suffix, write, t), characters=sum(map(len, texts)))
