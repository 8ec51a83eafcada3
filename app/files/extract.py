"""Plain text out of uploaded files, for chunking and search.

The kind of a file comes from its extension, then its content type, then (for a name without
an extension) a look at its bytes. Text is decoded as UTF-8 (or UTF-16/32 when a BOM says so);
PDF, DOCX and PPTX are read with pypdf, python-docx and the standard library, imported only
when such a file comes. NUL characters are dropped (PostgreSQL text cannot hold them).
"""

from __future__ import annotations

import codecs
import io
import json
import re
import zipfile
from collections.abc import Callable, Iterator
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import Any
from xml.etree import ElementTree

__all__ = [
    "MAX_UNZIPPED_BYTES",
    "SUPPORTED_EXTENSIONS",
    "ExtractionError",
    "UnsupportedFileError",
    "decode_text",
    "extract_text",
    "file_kind",
]


class UnsupportedFileError(ValueError):
    """The file's type cannot be searched (OpenAI's ``unsupported_file``)."""

    code = "unsupported_file"


class ExtractionError(ValueError):
    """The file claims a supported type but cannot be read (corrupt, encrypted ...)."""

    code = "invalid_file"


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# Extensions read as plain text: documents, data and source code.
_TEXT_EXTENSIONS = _words(
    """
    txt text md markdown mdx rst adoc asciidoc org tex bib log csv tsv jsonl ndjson
    yaml yml toml ini cfg conf properties env xml rss atom svg graphql gql proto sql
    py pyi ipynb js mjs cjs jsx ts mts cts tsx vue svelte css scss sass less
    c h cc cpp cxx hh hpp hxx cs java kt kts scala groovy gradle go rs rb php pl pm swift
    m mm r jl lua dart ex exs erl hrl hs elm clj cljs fs fsx ml mli nim zig v sol
    sh bash zsh fish ps1 psm1 bat cmd make mk cmake dockerfile tf hcl nix
    """
)
# Names without an extension that are text.
_TEXT_NAMES = frozenset(
    {"readme", "license", "makefile", "dockerfile", "gemfile", "rakefile", "procfile"}
)

_KIND_BY_EXTENSION: dict[str, str] = {
    **dict.fromkeys(_TEXT_EXTENSIONS, "text"),
    "html": "html",
    "htm": "html",
    "xhtml": "html",
    "json": "json",
    "pdf": "pdf",
    "docx": "docx",
    "pptx": "pptx",
}
SUPPORTED_EXTENSIONS: frozenset[str] = frozenset(_KIND_BY_EXTENSION)

_KIND_BY_CONTENT_TYPE: dict[str, str] = {
    "text/html": "html",
    "application/xhtml+xml": "html",
    "application/json": "json",
    "application/pdf": "pdf",
    "application/vnd.openxmlformats-officedocument.wordprocessingml.document": "docx",
    "application/vnd.openxmlformats-officedocument.presentationml.presentation": "pptx",
    **dict.fromkeys(
        (
            "application/javascript",
            "application/typescript",
            "application/x-python",
            "application/x-sh",
            "application/x-tex",
            "application/xml",
            "application/x-yaml",
            "application/yaml",
            "application/toml",
            "application/sql",
            "application/x-ndjson",
            "application/jsonl",
            "application/csv",
        ),
        "text",
    ),
}

_BOMS: tuple[tuple[bytes, str], ...] = (
    # UTF-32 first: its little-endian BOM starts with UTF-16's.
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)


def extract_text(data: bytes, *, filename: str, content_type: str | None = None) -> str:
    """The searchable text of a file.

    Raises ``UnsupportedFileError`` for a type that is not searched and ``ExtractionError``
    for a file that cannot be read. A file with no text (a scanned PDF) gives ``""``.
    """
    kind = file_kind(filename, content_type, data)
    text = _EXTRACTORS[kind](data)
    return text.replace("\x00", "")


def file_kind(filename: str, content_type: str | None = None, data: bytes | None = None) -> str:
    """``"text"``, ``"html"``, ``"json"``, ``"pdf"``, ``"docx"`` or ``"pptx"``; raises
    ``UnsupportedFileError``."""
    name = PurePosixPath(filename.replace("\\", "/")).name.lower()
    extension = name.rpartition(".")[2] if "." in name.lstrip(".") else ""
    kind = _KIND_BY_EXTENSION.get(extension)
    if kind is not None:
        return kind
    media_type = (content_type or "").partition(";")[0].strip().lower()
    kind = _KIND_BY_CONTENT_TYPE.get(media_type)
    if kind is None and media_type.startswith("text/"):
        kind = "text"
    if kind is not None:
        return kind
    if not extension:
        if name in _TEXT_NAMES:
            return "text"
        if data is not None:
            sniffed = _sniff(data)
            if sniffed is not None:
                return sniffed
    shown = f".{extension}" if extension else (media_type or "unknown")
    raise UnsupportedFileError(
        f"File type not supported: {filename!r} ({shown}). Supported types for file search: "
        "text, Markdown, HTML, JSON, PDF, DOCX, PPTX and source code files."
    )


def _sniff(data: bytes) -> str | None:
    head = data[:1024]
    if head.startswith(b"%PDF-"):
        return "pdf"
    if any(head.startswith(bom) for bom, _ in _BOMS):
        return "text"
    if b"\x00" in head:
        return None
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the 1 KiB window is still text.
        if exc.start < len(head) - 3:
            return None
    return "text"


def decode_text(data: bytes) -> str:
    """Bytes as text: the encoding of a BOM if there is one, else UTF-8 (bad bytes replaced)."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(encoding, errors="replace")
    return data.decode("utf-8", errors="replace")


def _extract_plain(data: bytes) -> str:
    return decode_text(data)


# ----------------------------------------------------------------------------- HTML

_SKIPPED_TAGS = frozenset({"script", "style", "noscript", "template", "svg"})
# Blocks that stand apart (a blank line around them) and blocks that only start a new line.
_PARAGRAPH_TAGS = _words(
    """
    address article aside blockquote body details dialog dl fieldset figure footer form
    h1 h2 h3 h4 h5 h6 header hgroup hr main nav ol p pre section table ul
    """
)
_LINE_TAGS = _words("br caption dd div dt figcaption li summary tbody tfoot thead tr")
_CELL_TAGS = frozenset({"td", "th"})
_SPACES = re.compile(r"[ \t\r\n\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n{3,}")


class _VisibleText(HTMLParser):
    """Collects the text a browser shows: no scripts or styles, one line per block, a blank
    line around paragraphs, table cells split by tabs, ``<pre>`` as it is."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.title = ""
        self._skip_depth = 0
        self._pre_depth = 0
        self._in_title = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            self._in_title = True
        elif tag in _SKIPPED_TAGS:
            self._skip_depth += 1
        elif self._skip_depth:
            return
        elif tag in _CELL_TAGS:
            if self.parts and not self.parts[-1].endswith("\n"):
                self.parts.append("\t")
        elif tag == "img":
            alt = dict(attrs).get("alt")
            if alt:
                self._text(f" {alt} ")
        else:
            self._break(tag)
            if tag == "pre":
                self._pre_depth += 1

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in _SKIPPED_TAGS:
            self.handle_starttag(tag, attrs)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            self._in_title = False
        elif tag in _SKIPPED_TAGS:
            self._skip_depth = max(0, self._skip_depth - 1)
        elif not self._skip_depth:
            if tag == "pre":
                self._pre_depth = max(0, self._pre_depth - 1)
            self._break(tag)

    def handle_data(self, data: str) -> None:
        if self._in_title:
            self.title += data
        elif self._skip_depth:
            return
        elif self._pre_depth:
            self.parts.append(data)
        else:
            self._text(data)

    def _text(self, data: str) -> None:
        text = _SPACES.sub(" ", data)
        if not self.parts or self.parts[-1][-1:] in (" ", "\t", "\n"):
            text = text.lstrip(" ")
        if text:
            self.parts.append(text)

    def _break(self, tag: str) -> None:
        wanted = 2 if tag in _PARAGRAPH_TAGS else 1 if tag in _LINE_TAGS else 0
        if not self.parts:
            return
        have = 0
        for part in reversed(self.parts):
            stripped = part.rstrip("\n")
            have += len(part) - len(stripped)
            if stripped or have >= wanted:
                break
        if wanted > have:
            self.parts.append("\n" * (wanted - have))


def _extract_html(data: bytes) -> str:
    parser = _VisibleText()
    parser.feed(decode_text(data))
    parser.close()
    lines = "\n".join(line.rstrip() for line in "".join(parser.parts).split("\n"))
    body = _BLANK_LINES.sub("\n\n", lines).strip("\n")
    title = " ".join(parser.title.split())
    if title and not body.startswith(title):
        return f"{title}\n\n{body}" if body else title
    return body


# ----------------------------------------------------------------------------- JSON


def _extract_json(data: bytes) -> str:
    text = decode_text(data)
    try:
        value: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExtractionError(f"The file is not valid JSON: {exc}") from exc
    return json.dumps(value, indent=2, ensure_ascii=False)


# ----------------------------------------------------------------------------- PDF


def _extract_pdf(data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PyPdfError

    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise ExtractionError("The PDF is encrypted with a password.")
        pages = [(page.extract_text() or "").strip() for page in reader.pages]
    except ExtractionError:
        raise
    except (PyPdfError, ValueError, KeyError, TypeError, AttributeError, OSError) as exc:
        raise ExtractionError(f"The PDF cannot be read: {exc}") from exc
    except Exception as exc:  # pypdf raises many kinds of errors on damaged files
        raise ExtractionError(f"The PDF cannot be read: {exc!r}") from exc
    return "\n\n".join(page for page in pages if page)


# ----------------------------------------------------------------------------- DOCX

# DOCX and PPTX are zip files: refuse one that would expand past this (a zip bomb).
MAX_UNZIPPED_BYTES = 512 * 1024 * 1024


def _check_zip_size(data: bytes, kind: str) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            total = sum(info.file_size for info in archive.infolist())
    except (zipfile.BadZipFile, ValueError, OSError) as exc:
        raise ExtractionError(f"The {kind} file cannot be read: {exc}") from exc
    if total > MAX_UNZIPPED_BYTES:
        raise ExtractionError(
            f"The {kind} file expands to {total} bytes, more than the {MAX_UNZIPPED_BYTES} allowed."
        )


def _extract_docx(data: bytes) -> str:
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    _check_zip_size(data, "DOCX")
    try:
        document = docx.Document(io.BytesIO(data))
        blocks = list(_docx_blocks(document))
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as exc:
        raise ExtractionError(f"The DOCX file cannot be read: {exc}") from exc
    except Exception as exc:  # lxml and python-docx errors on damaged files
        raise ExtractionError(f"The DOCX file cannot be read: {exc!r}") from exc
    return "\n\n".join(block for block in blocks if block)


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


def _extract_pptx(data: bytes) -> str:
    _check_zip_size(data, "PPTX")
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            slides = sorted(
                (int(m.group(1)), name)
                for name in archive.namelist()
                if (m := _SLIDE_NAME.fullmatch(name))
            )
            if not slides:
                raise ExtractionError("The PPTX file has no slides.")
            texts = [_pptx_slide_text(archive.read(name)) for _, name in slides]
    except ExtractionError:
        raise
    except (zipfile.BadZipFile, ElementTree.ParseError, KeyError, ValueError, OSError) as exc:
        raise ExtractionError(f"The PPTX file cannot be read: {exc}") from exc
    return "\n\n".join(text for text in texts if text)


def _pptx_slide_text(xml: bytes) -> str:
    root = ElementTree.fromstring(xml)
    lines: list[str] = []
    for paragraph in root.iter(f"{_DRAWING_NS}p"):
        line = "".join(node.text or "" for node in paragraph.iter(f"{_DRAWING_NS}t")).strip()
        if line:
            lines.append(line)
    return "\n".join(lines)


_EXTRACTORS: dict[str, Callable[[bytes], str]] = {
    "text": _extract_plain,
    "html": _extract_html,
    "json": _extract_json,
    "pdf": _extract_pdf,
    "docx": _extract_docx,
    "pptx": _extract_pptx,
}
