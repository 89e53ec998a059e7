"""PDF in, Word document out: a PDF's text (pypdf) as paragraphs and headings, translated into a .docx (python-docx);
a PDF has no structure to write back into.

Lines are the text pypdf shows at one height; consecutive lines of one font size, no further apart than
`PARAGRAPH_GAP` times that size, make a paragraph (a line ending in a hyphen joins the next without a space). A
paragraph set larger than the body text (the size most characters have) by `HEADING_SCALE` is a heading, level 1
for the largest such size, down to level 3. Every stream pypdf inflates is held to `max_expanded_bytes`, as is the
text it finds in all; a PDF without text (a scanned one: images of its pages) is a FileError saying so.
"""

from __future__ import annotations

import io
from collections import Counter
from dataclasses import dataclass, field

from .parsed import FileError, FileTooLarge, ParsedFile, reading

PARAGRAPH_GAP = 1.8  # × the font size: a wider gap between lines starts a new paragraph
HEADING_SCALE = 1.2  # × the body text's size: a paragraph at least this large is a heading
MAX_HEADING_LEVEL = 3
# pypdf's limits on what one stream may inflate to, held to the server's limit on a file's inflated bytes
STREAM_LIMITS = ("zlib_maximum_output_length", "lzw_maximum_output_length", "run_length_maximum_output_length",
                 "jbig2_maximum_output_length", "brotli_maximum_output_length", "maximum_declared_stream_length",
                 "array_based_stream_maximum_output_length", "image_maximum_buffer_size")


@dataclass
class Block:
    size: float
    lines: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        out = ""
        for line in self.lines:
            out = out[:-1] + line if out.endswith("-") and out[-2:-1].isalpha() else (out + " " + line).strip()
        return out


def pdf(data: bytes, suffix: str, max_expanded_bytes: int, max_ratio: int) -> ParsedFile:
    import pypdf

    if not data.startswith(b"%PDF"):
        raise FileError(f"not a valid {suffix} file: it does not start with %PDF")
    with pypdf.apply_configuration(**{name: max_expanded_bytes for name in STREAM_LIMITS}):
        blocks = reading(suffix, lambda: _blocks(pypdf.PdfReader(io.BytesIO(data)), max_expanded_bytes))
    if not blocks:
        raise FileError(f"the {suffix} file has no text to translate: a scanned PDF holds images of its pages (run "
                        f"OCR on it first)")
    levels = _heading_levels(blocks)

    def write(translations: list[str]) -> bytes:
        import docx

        document = docx.Document()
        for block, translated in zip(blocks, translations):
            level = levels.get(block.size)
            document.add_heading(translated, level) if level else document.add_paragraph(translated)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()

    texts = [block.text for block in blocks]
    return ParsedFile(texts, "text", lambda t: reading(suffix, write, t), characters=sum(map(len, texts)))


def _blocks(reader, max_characters: int) -> list[Block]:
    blocks: list[Block] = []
    found = 0
    for page in reader.pages:
        lines: list[tuple[float, float, str]] = []  # (height on the page, font size, text)

        def visit(text, cm, tm, font, size):
            scale = abs(tm[3] * cm[3]) or 1.0
            height = round(tm[5] * cm[3] + cm[5], 1)
            for i, piece in enumerate(text.split("\n")):
                if i or not lines or lines[-1][0] != height:
                    lines.append((height, round(size * scale, 1), ""))
                line = lines[-1]
                lines[-1] = (line[0], max(line[1], round(size * scale, 1)), line[2] + piece)

        page.extract_text(visitor_text=visit)
        page_blocks = _paragraphs([(h, s, t.strip()) for h, s, t in lines if t.strip()])
        found += sum(len(block.text) for block in page_blocks)
        if found > max_characters:
            raise FileTooLarge(f"the .pdf file's text runs past {max_characters} characters", limit=max_characters)
        blocks += page_blocks
    return blocks


def _paragraphs(lines: list[tuple[float, float, str]]) -> list[Block]:
    blocks: list[Block] = []
    previous = None
    for height, size, text in lines:
        if previous is None or size != blocks[-1].size or abs(previous - height) > PARAGRAPH_GAP * size:
            blocks.append(Block(size))
        blocks[-1].lines.append(text)
        previous = height
    return blocks


def _heading_levels(blocks: list[Block]) -> dict[float, int]:
    """Font size → heading level, for the sizes larger than the body text's."""
    weights = Counter()
    for block in blocks:
        weights[block.size] += len(block.text)
    body = weights.most_common(1)[0][0]
    larger = sorted((size for size in weights if size >= body * HEADING_SCALE), reverse=True)
    return {size: min(level, MAX_HEADING_LEVEL) for level, size in enumerate(larger, 1)}
