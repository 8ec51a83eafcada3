"""Text out of PDF (pypdf), DOCX (python-docx) and PPTX (the slides' XML), within a budget.

Each extractor takes the file's bytes or its path and the ``ExtractionLimits``, and checks
what can be checked before parsing, so a hostile file fails fast with a message naming the
limit rather than by running into the time or memory budget:

- DOCX and PPTX are zip files: the number of entries, the total size they declare once
  uncompressed and each large entry's compression ratio (a decompression bomb) are checked
  from the zip's directory before anything is inflated. Python's ``zipfile`` never returns
  more of an entry than the size it declares (it stops there and fails the CRC check), so
  a lie does not get past these checks. python-docx parses with lxml's defaults: no entity
  expansion, no network, and a nesting depth of at most 256 (a deeper document is a parse
  error).
- PDF: the page count the page tree declares (before the tree is walked), then the pages it
  has, before the first page is read; the text gathered so far after each page. pypdf's own
  limits (``pypdf.Configuration``: decompressed stream size, decoding work, array and page tree
  sizes) raise ``LimitReachedError``, reported as a limit too.

A ``MemoryError`` (the child's address space limit) is never turned into "cannot be read": it
reaches the worker, which reports the memory budget.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any
from xml.etree import ElementTree

from app.files.extract_limits import (
    ExtractionError,
    ExtractionLimits,
    OverBudgetError,
    Source,
)

__all__ = ["OFFICE_EXTRACTORS", "check_zip"]

# A zip entry smaller than this is not checked for its compression ratio: a small file that
# compresses well (an empty table, a style sheet) is not a bomb.
_RATIO_FLOOR = 1024 * 1024


def _stream(source: Source) -> IO[bytes] | Path:
    return io.BytesIO(source) if isinstance(source, bytes) else source


# ----------------------------------------------------------------------------- PDF


def extract_pdf(source: Source, limits: ExtractionLimits) -> str:
    from pypdf import PdfReader
    from pypdf.errors import LimitReachedError, PyPdfError

    pages: list[str] = []
    try:
        reader = PdfReader(_stream(source))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ExtractionError("The PDF is encrypted with a password.")
        _check_pages(_declared_pages(reader), limits)  # before the page tree is walked
        _check_pages(len(reader.pages), limits)
        chars = 0
        for page in reader.pages:
            text = (page.extract_text() or "").strip()
            chars += len(text) + 2
            limits.check_output(chars)
            if text:
                pages.append(text)
    except (ExtractionError, MemoryError):
        raise
    except LimitReachedError as exc:
        raise OverBudgetError(f"The PDF is over a limit of the PDF reader: {exc}") from exc
    except RecursionError:
        raise ExtractionError("The PDF cannot be read: its objects nest too deeply.") from None
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise ExtractionError(f"The PDF cannot be read: {exc}") from exc
    except Exception as exc:  # pypdf raises many kinds of errors on damaged files
        raise ExtractionError(f"The PDF cannot be read: {exc!r}") from exc
    return "\n\n".join(pages)


def _check_pages(count: int, limits: ExtractionLimits) -> None:
    if count > limits.max_pdf_pages:
        raise OverBudgetError(
            f"The PDF has {count} pages, more than the {limits.max_pdf_pages} allowed."
        )


def _declared_pages(reader: Any) -> int:
    """The page count the page tree's root declares (read before the tree is walked, so a
    file that declares too many pages is refused without walking them), 0 if it has none."""
    try:
        count = reader.trailer["/Root"]["/Pages"]["/Count"]
    except (KeyError, TypeError, AttributeError):
        return 0
    return count if isinstance(count, int) else 0


# ----------------------------------------------------------------------------- zip


def check_zip(source: Source, kind: str, limits: ExtractionLimits) -> None:
    """Refuse a zip (DOCX, PPTX) that would expand past the budget, from its directory alone."""
    try:
        with zipfile.ZipFile(_stream(source)) as archive:
            entries = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ExtractionError(f"The {kind} file cannot be read: {exc}") from exc
    if len(entries) > limits.max_zip_entries:
        raise OverBudgetError(
            f"The {kind} file has {len(entries)} entries, more than the "
            f"{limits.max_zip_entries} allowed."
        )
    total = sum(entry.file_size for entry in entries)
    if total > limits.max_unzipped_bytes:
        raise OverBudgetError(
            f"The {kind} file expands to {total} bytes, more than the "
            f"{limits.max_unzipped_bytes} allowed."
        )
    for entry in entries:
        ratio = entry.file_size // max(entry.compress_size, 1)
        if entry.file_size > _RATIO_FLOOR and ratio > limits.max_compression_ratio:
            raise OverBudgetError(
                f"The {kind} file's entry {entry.filename!r} expands {ratio} times "
                f"({entry.compress_size} bytes to {entry.file_size}), more than the "
                f"{limits.max_compression_ratio} times allowed: a decompression bomb."
            )


# ----------------------------------------------------------------------------- DOCX


def extract_docx(source: Source, limits: ExtractionLimits) -> str:
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    check_zip(source, "DOCX", limits)
    blocks: list[str] = []
    try:
        document = docx.Document(io.BytesIO(source) if isinstance(source, bytes) else str(source))
        chars = 0
        for block in _docx_blocks(document):
            chars += len(block) + 2
            limits.check_output(chars)
            if block:
                blocks.append(block)
    except (OverBudgetError, MemoryError):
        raise
    except RecursionError:
        raise ExtractionError("The DOCX file cannot be read: it nests too deeply.") from None
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ExtractionError(f"The DOCX file cannot be read: {exc}") from exc
    except Exception as exc:  # lxml and python-docx errors on damaged files
        if _out_of_memory(exc):
            raise MemoryError from exc
        raise ExtractionError(f"The DOCX file cannot be read: {exc!r}") from exc
    return "\n\n".join(blocks)


def _out_of_memory(exc: Exception) -> bool:
    """libxml2 failing an allocation (the address space limit): lxml reports it as a syntax
    error, "Memory allocation failed", or "unknown error" when even the report could not be
    allocated."""
    if type(exc).__name__ != "XMLSyntaxError":  # lxml.etree's (lxml has no type stubs)
        return False
    message = str(getattr(exc, "msg", ""))
    return "Memory allocation failed" in message or message == "unknown error"


def _docx_blocks(container: Any) -> Iterator[str]:
    """Paragraphs and tables in document order; a table row per line, cells split by " | "."""
    from docx.table import Table

    for block in container.iter_inner_content():
        if isinstance(block, Table):
            rows: list[str] = []
            for row in block.rows:
                cells: list[str] = []
                seen: set[int] = set()
                for cell in row.cells:
                    if id(cell._tc) in seen:  # a merged cell repeats in python-docx
                        continue
                    seen.add(id(cell._tc))
                    cells.append(" ".join(b for b in _docx_blocks(cell) if b))
                if any(cells):
                    rows.append(" | ".join(cells))
            yield "\n".join(rows)
        else:
            yield block.text.strip()


# ----------------------------------------------------------------------------- PPTX

_DRAWING_NS = "{http://schemas.openxmlformats.org/drawingml/2006/main}"
_SLIDE_NAME = re.compile(r"ppt/slides/slide(\d+)\.xml")


def extract_pptx(source: Source, limits: ExtractionLimits) -> str:
    check_zip(source, "PPTX", limits)
    texts: list[str] = []
    try:
        with zipfile.ZipFile(_stream(source)) as archive:
            slides = sorted(
                (int(m.group(1)), name)
                for name in archive.namelist()
                if (m := _SLIDE_NAME.fullmatch(name))
            )
            if not slides:
                raise ExtractionError("The PPTX file has no slides.")
            chars = 0
            for _, name in slides:
                text = _pptx_slide_text(archive.read(name))
                chars += len(text) + 2
                limits.check_output(chars)
                if text:
                    texts.append(text)
    except ExtractionError:
        raise
    except (zipfile.BadZipFile, ElementTree.ParseError, KeyError, ValueError, OSError) as exc:
        raise ExtractionError(f"The PPTX file cannot be read: {exc}") from exc
    return "\n\n".join(texts)


def _pptx_slide_text(xml: bytes) -> str:
    root = ElementTree.fromstring(xml)
    lines: list[str] = []
    for paragraph in root.iter(f"{_DRAWING_NS}p"):
        line = "".join(node.text or "" for node in paragraph.iter(f"{_DRAWING_NS}t")).strip()
        if line:
            lines.append(line)
    return "\n".join(lines)


OFFICE_EXTRACTORS: dict[str, Callable[[Source, ExtractionLimits], str]] = {
    "pdf": extract_pdf,
    "docx": extract_docx,
    "pptx": extract_pptx,
}
