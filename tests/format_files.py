"""Small files of each document format, built in memory with the formats' own libraries (or their XML, where the
server reads the XML itself), and what each holds read back: the in-process and the real-server tests share them."""

import datetime
import io

import openpyxl
import pptx
from pptx.util import Inches


def xlsx_bytes() -> bytes:
    """Text cells "forty-two" (bold) and "seven", beside a number, a formula and a date."""
    book = openpyxl.Workbook()
    sheet = book.active
    sheet["A1"], sheet["B1"], sheet["C1"], sheet["D1"] = "forty-two", 42, "=B1*2", datetime.date(2024, 1, 2)
    sheet["A1"].font = openpyxl.styles.Font(bold=True)
    book.create_sheet("second")["B3"] = "seven"
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def xlsx_cells(data: bytes) -> list[list]:
    book = openpyxl.load_workbook(io.BytesIO(data))
    return [[cell.value for row in sheet.iter_rows() for cell in row] for sheet in book.worksheets]


def pptx_bytes() -> bytes:
    """A title "forty-two", a body "three hundred" (its second run bold), a table "seven"/"nine", notes "eleven"."""
    presentation = pptx.Presentation()
    slide = presentation.slides.add_slide(presentation.slide_layouts[1])
    slide.shapes.title.text = "forty-two"
    body = slide.placeholders[1].text_frame
    body.text = "three "
    bold = body.paragraphs[0].add_run()
    bold.text, bold.font.bold = "hundred", True
    table = slide.shapes.add_table(1, 2, Inches(1), Inches(4), Inches(4), Inches(1)).table
    table.cell(0, 0).text, table.cell(0, 1).text = "seven", "nine"
    slide.notes_slide.notes_text_frame.text = "eleven"
    out = io.BytesIO()
    presentation.save(out)
    return out.getvalue()


def pptx_texts(data: bytes) -> dict:
    slide = pptx.Presentation(io.BytesIO(data)).slides[0]
    table = next(shape.table for shape in slide.shapes if shape.has_table)
    body = slide.placeholders[1].text_frame.paragraphs[0]
    return {"title": slide.shapes.title.text_frame.text, "body": body.text,
            "bold": [bool(run.font.bold) for run in body.runs],
            "table": [table.cell(0, 0).text, table.cell(0, 1).text],
            "notes": slide.notes_slide.notes_text_frame.text}


XLIFF_12 = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
 <file source-language="en" target-language="de" datatype="plaintext" original="app">
  <body>
   <trans-unit id="1"><source>forty-two</source></trans-unit>
   <trans-unit id="2"><source>seven <ph id="1">&lt;br/&gt;</ph></source><target state="new">old</target></trans-unit>
   <trans-unit id="3"><source><x id="2"/></source></trans-unit>
  </body>
 </file>
</xliff>"""
XLIFF_2 = b"""<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
 <file id="f1"><unit id="u1"><segment><source>nine</source></segment></unit>
  <unit id="u2"><segment><source>eleven</source><target>x</target></segment></unit></file>
</xliff>"""


def xliff_targets(data: bytes) -> list[tuple]:
    """Each unit's (state, target's content as XML) of an XLIFF 1.2 or 2.x file."""
    from lxml import etree

    root = etree.fromstring(data)
    out = []
    for target in root.iter("{*}target"):
        holder = target if root.get("version") == "1.2" else target.getparent()
        inner = (target.text or "") + "".join(etree.tostring(child, encoding="unicode") for child in target)
        out.append((holder.get("state"), inner.replace(' xmlns="urn:oasis:names:tc:xliff:document:1.2"', "")))
    return out


ODF = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
       'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
       'xmlns:table="urn:oasis:names:tc:opendocument:xmlns:table:1.0" '
       'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
       'xmlns:presentation="urn:oasis:names:tc:opendocument:xmlns:presentation:1.0"')
ODT_BODY = ('<office:text><text:h text:outline-level="1">forty-two</text:h>'
            '<text:p>three <text:span text:style-name="T1">hundred</text:span></text:p>'
            '<table:table><table:table-row><table:table-cell><text:p>seven</text:p></table:table-cell>'
            '</table:table-row></table:table>'
            '<text:p>nine<text:note><text:note-body><text:p>eleven</text:p></text:note-body></text:note></text:p>'
            '</office:text>')
ODP_BODY = ('<office:presentation><draw:page draw:name="one"><draw:frame><draw:text-box><text:p>forty-two</text:p>'
            '</draw:text-box></draw:frame><presentation:notes><draw:frame><draw:text-box><text:p>seven</text:p>'
            '</draw:text-box></draw:frame></presentation:notes></draw:page></office:presentation>')


def opendocument_bytes(suffix: str) -> bytes:
    """A minimal .odt or .odp: its `mimetype` first and stored, a manifest, and content.xml."""
    import zipfile

    kind = {".odt": "text", ".odp": "presentation"}[suffix]
    body = {".odt": ODT_BODY, ".odp": ODP_BODY}[suffix]
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), f"application/vnd.oasis.opendocument.{kind}")
        archive.writestr("META-INF/manifest.xml", '<manifest:manifest xmlns:manifest="urn:oasis:names:tc:'
                         'opendocument:xmlns:manifest:1.0"><manifest:file-entry manifest:full-path="/" '
                         f'manifest:media-type="application/vnd.oasis.opendocument.{kind}"/></manifest:manifest>')
        archive.writestr("content.xml", f'<?xml version="1.0" encoding="UTF-8"?><office:document-content {ODF} '
                         f'office:version="1.2"><office:body>{body}</office:body></office:document-content>')
    return out.getvalue()


def opendocument_texts(data: bytes) -> dict:
    """The text of each paragraph and heading of content.xml in order, the spans' count, and the archive's first
    entry and its compression."""
    import zipfile

    from lxml import etree

    archive = zipfile.ZipFile(io.BytesIO(data))
    root = etree.fromstring(archive.read("content.xml"))
    text = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
    first = archive.infolist()[0]
    return {"paragraphs": ["".join(p.xpath("text()|*[not(self::text:note)]//text()", namespaces={"text": text}))
                           for p in root.iter(f"{{{text}}}p", f"{{{text}}}h")],
            "spans": len(list(root.iter(f"{{{text}}}span"))), "first": (first.filename, first.compress_type)}


CHAPTER = ('<?xml version="1.0" encoding="UTF-8"?>\n<!DOCTYPE html>\n<html xmlns="http://www.w3.org/1999/xhtml">'
           '<head><title>forty-two</title><style>p { color: red; }</style></head>'
           '<body><h1>seven</h1><p>nine</p></body></html>')


def epub_bytes(chapter: str = CHAPTER) -> bytes:
    """A minimal EPUB: mimetype (first, stored), container, package document, one chapter."""
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr(zipfile.ZipInfo("mimetype"), "application/epub+zip")
        archive.writestr("META-INF/container.xml", '<container xmlns="urn:oasis:names:tc:opendocument:xmlns:container"'
                         ' version="1.0"><rootfiles><rootfile full-path="OEBPS/book.opf" '
                         'media-type="application/oebps-package+xml"/></rootfiles></container>')
        archive.writestr("OEBPS/book.opf", '<package xmlns="http://www.idpf.org/2007/opf" version="3.0"><manifest>'
                         '<item id="c1" href="one.xhtml" media-type="application/xhtml+xml"/></manifest>'
                         '<spine><itemref idref="c1"/></spine></package>')
        archive.writestr("OEBPS/one.xhtml", chapter)
    return out.getvalue()


def epub_chapter(data: bytes) -> tuple[str, str]:
    """The chapter's text, and the archive's first entry."""
    import zipfile

    archive = zipfile.ZipFile(io.BytesIO(data))
    return archive.read("OEBPS/one.xhtml").decode(), archive.infolist()[0].filename


def pdf_bytes(*pages: list[tuple[int, int, str]]) -> bytes:
    """A PDF of Helvetica text: each page a list of (font size, height on the page, text); a page without any is a
    scanned page's (no text)."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>",
               f"<< /Type /Pages /Kids [{' '.join(f'{3 + 2 * i} 0 R' for i in range(len(pages)))}] "
               f"/Count {len(pages)} >>"]
    font = 3 + 2 * len(pages)
    for i, lines in enumerate(pages):
        stream = "".join(f"BT /F1 {size} Tf 72 {height} Td ({text}) Tj ET\n" for size, height, text in lines)
        objects += [f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
                    f"/Resources << /Font << /F1 {font} 0 R >> >> >>",
                    f"<< /Length {len(stream)} >>\nstream\n{stream}endstream"]
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out, offsets = "%PDF-1.4\n", []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n" + "".join(f"{o:010d} 00000 n \n" for o in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n"
    return out.encode("latin-1")


PDF_PAGES = ([(24, 700, "forty-two"), (12, 660, "three hundred and"), (12, 646, "five."), (12, 600, "seven.")],
             [(18, 700, "nine"), (12, 660, "eleven.")])


def docx_blocks(data: bytes) -> list[tuple[str, str]]:
    """A Word document's (style, text) per paragraph."""
    import docx

    return [(p.style.name, p.text) for p in docx.Document(io.BytesIO(data)).paragraphs]


def pdf_bomb(inflated: int) -> bytes:
    """A one-page PDF whose content stream inflates from a few kilobytes to `inflated` bytes."""
    import zlib

    plain = pdf_bytes([(12, 700, "seven")])
    packed = zlib.compress(b" " * inflated, 9)
    head, _, rest = plain.partition(b"<< /Length")
    rest = rest.split(b"endstream", 1)[1]
    body = head + b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(packed) + packed + b"\nendstream" + rest
    return body  # its xref offsets are stale: pypdf finds the objects again, as it does for damaged files
