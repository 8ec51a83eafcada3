"""Hostile uploads, built in the test (none is committed): the kinds of file the security review
used to hold the ingestion slots for minutes and to take gigabytes of memory.

- ``slow_pdf``: every page draws the same large content stream (a few KiB compressed), so
  each page's text extraction re-parses it: a small file that keeps pypdf busy for minutes.
- ``page_bomb_pdf``: many pages in a page tree of several levels.
- ``flate_bomb_pdf``: one page whose content stream inflates to 100 MB of spaces.
- ``docx_with_document``: the sample DOCX with its ``word/document.xml`` replaced, written in
  pieces so even a 300 MB document is never whole in the test's memory; ``repeated_paragraphs``
  and ``nested_xml`` are the documents (a zip bomb of repeated XML, a deeply nested one).
"""

from __future__ import annotations

import functools
import io
import zipfile
import zlib
from collections.abc import Iterable, Iterator
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"


def _pdf(objects: list[bytes]) -> bytes:
    """Objects 1..n as a PDF with a correct cross-reference table; object 1 is the catalog."""
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets: list[int] = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(b"trailer\n<< /Size %d /Root 1 0 R >>\n" % (len(objects) + 1))
    out.write(b"startxref\n%d\n%%%%EOF\n" % xref)
    return out.getvalue()


def _flate_stream(chunks: Iterable[bytes]) -> bytes:
    compressor = zlib.compressobj(9)
    data = b"".join(compressor.compress(chunk) for chunk in chunks) + compressor.flush()
    return b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(data) + data + b"\nendstream"


_FONT = b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>"


def _pages_pdf(page_count: int, content: bytes, fanout: int = 100) -> bytes:
    """``page_count`` pages sharing one content stream (object 3) and one font (object 4), in a
    page tree whose nodes hold at most ``fanout`` kids."""
    objects: list[bytes] = [b"<< /Type /Catalog /Pages 2 0 R >>", b"", content, _FONT]
    page = (
        b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 612 792] "
        b"/Resources << /Font << /F1 4 0 R >> >> /Contents 3 0 R >>"
    )

    def add(body: bytes = b"") -> int:
        objects.append(body)
        return len(objects)

    def build(node: int, parent: int | None, count: int) -> None:
        if count <= fanout:
            kids = [add(page % node) for _ in range(count)]
        else:
            size = fanout
            while size * fanout < count:
                size *= fanout
            kids = []
            for start in range(0, count, size):
                kid = add()
                build(kid, node, min(size, count - start))
                kids.append(kid)
        refs = b" ".join(b"%d 0 R" % kid for kid in kids)
        tree = b"<< /Type /Pages /Kids [%s] /Count %d" % (refs, count)
        if parent is not None:
            tree += b" /Parent %d 0 R" % parent
        objects[node - 1] = tree + b" >>"

    build(2, None, page_count)
    return _pdf(objects)


@functools.cache
def slow_pdf(pages: int = 2_000, lines: int = 20_000) -> bytes:
    """Pages that each re-read one content stream of ``lines`` short text lines."""
    ops = b"BT /F1 9 Tf 72 720 Td 11 TL " + b"(harbor ledger entry) Tj T* " * lines + b"ET"
    return _pages_pdf(pages, _flate_stream([ops]))


@functools.cache
def page_bomb_pdf(pages: int = 20_000) -> bytes:
    """Many pages with a tiny shared content stream."""
    return _pages_pdf(pages, _flate_stream([b"BT /F1 9 Tf 72 720 Td (page) Tj ET"]))


@functools.cache
def flate_bomb_pdf(megabytes: int = 100) -> bytes:
    """One page whose content stream inflates to ``megabytes`` MB of spaces."""
    return _pages_pdf(1, _flate_stream(b" " * 1_000_000 for _ in range(megabytes)))


def docx_with_document(document: Iterable[bytes]) -> bytes:
    """The sample DOCX with ``word/document.xml`` replaced by the pieces ``document`` yields."""
    out = io.BytesIO()
    with (
        zipfile.ZipFile(FIXTURES / "sample.docx") as sample,
        zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as docx,
    ):
        for entry in sample.infolist():
            if entry.filename != "word/document.xml":
                docx.writestr(entry, sample.read(entry))
        with docx.open("word/document.xml", "w", force_zip64=True) as target:
            for piece in document:
                target.write(piece)
    return out.getvalue()


def repeated_paragraphs(megabytes: int) -> Iterator[bytes]:
    """A document of ``megabytes`` MB of the same paragraph (it compresses about 1000 times)."""
    paragraph = b'<w:p><w:r><w:t xml:space="preserve">harbor ledger entry </w:t></w:r></w:p>'
    block = paragraph * (1_000_000 // len(paragraph))
    yield b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    yield f'<w:document xmlns:w="{W}"><w:body>'.encode()
    for _ in range(megabytes):
        yield block
    yield b"</w:body></w:document>"


def nested_xml(depth: int) -> Iterator[bytes]:
    """A document whose body nests ``depth`` runs deep."""
    yield b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    yield f'<w:document xmlns:w="{W}"><w:body><w:p>'.encode()
    yield b"<w:r>" * depth
    yield b"<w:t>deep</w:t>"
    yield b"</w:r>" * depth
    yield b"</w:p></w:body></w:document>"


@functools.cache
def zip_bomb_docx(megabytes: int = 300) -> bytes:
    return docx_with_document(repeated_paragraphs(megabytes))


@functools.cache
def nested_docx(depth: int = 100_000) -> bytes:
    return docx_with_document(nested_xml(depth))
