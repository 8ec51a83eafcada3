"""Plain text out of uploaded files, for chunking and search.

The kind of a file comes from its extension, then its content type, then (for a name without
an extension) a look at its bytes. Text is decoded as UTF-8 (or UTF-16/32 when a BOM says so);
PDF, DOCX and PPTX are read in ``extract_office`` (pypdf, python-docx and the standard library,
imported only when such a file comes). NUL characters are dropped (PostgreSQL text cannot hold
them).

``extract_text`` runs in the process that calls it: the gateway never calls it itself, it
hands each file to a budgeted child process (``extract_process.ProcessExtractor``, which runs
``extract_worker``). ``ExtractionLimits`` is that budget; the checks that need no child (the
output size, the sizes a zip declares, a PDF's page count) are made here, in the child, so a
file over them fails fast with a message that names the limit.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Callable
from html.parser import HTMLParser
from pathlib import PurePosixPath
from typing import Any

from app.files.extract_limits import (
    MIB,
    ExtractionError,
    ExtractionLimits,
    ExtractorFailedError,
    OverBudgetError,
    Source,
    UnsupportedFileError,
)
from app.files.extract_office import OFFICE_EXTRACTORS

__all__ = [
    "MIB",
    "SUPPORTED_EXTENSIONS",
    "ExtractionError",
    "ExtractionLimits",
    "ExtractorFailedError",
    "OverBudgetError",
    "Source",
    "UnsupportedFileError",
    "declared_kind",
    "decode_text",
    "extract_text",
    "file_kind",
]


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


def extract_text(
    source: Source,
    *,
    filename: str,
    content_type: str | None = None,
    limits: ExtractionLimits | None = None,
) -> str:
    """The searchable text of a file (its bytes, or the path of the file holding them).

    Raises ``UnsupportedFileError`` for a type that is not searched, ``OverBudgetError`` for a
    file over ``limits`` and ``ExtractionError`` for a file that cannot be read. A file with no
    text (a scanned PDF) gives ``""``.
    """
    limits = limits or ExtractionLimits()
    kind = declared_kind(filename, content_type)
    if kind is None:
        kind = file_kind(filename, content_type, _head(source))
    if kind in _TEXT_KINDS:
        data = _read_text_source(source, limits)
        text = _EXTRACTORS[kind](data)
    else:
        text = OFFICE_EXTRACTORS[kind](source, limits)
    limits.check_output(len(text))
    return text.replace("\x00", "")


def file_kind(filename: str, content_type: str | None = None, data: bytes | None = None) -> str:
    """``"text"``, ``"html"``, ``"json"``, ``"pdf"``, ``"docx"`` or ``"pptx"``; raises
    ``UnsupportedFileError``."""
    kind = declared_kind(filename, content_type)
    if kind is not None:
        return kind
    if data is not None:
        sniffed = _sniff(data)
        if sniffed is not None:
            return sniffed
    raise _unsupported(filename, content_type)


def declared_kind(filename: str, content_type: str | None = None) -> str | None:
    """The kind the name or the content type declares; None when only the bytes can tell (a
    name without an extension and no known content type). Raises ``UnsupportedFileError`` for
    a declared type that is not searched."""
    name, extension = _name_and_extension(filename)
    kind = _KIND_BY_EXTENSION.get(extension)
    if kind is not None:
        return kind
    media_type = _media_type(content_type)
    kind = _KIND_BY_CONTENT_TYPE.get(media_type)
    if kind is None and media_type.startswith("text/"):
        kind = "text"
    if kind is not None:
        return kind
    if not extension:
        return "text" if name in _TEXT_NAMES else None
    raise _unsupported(filename, content_type)


def _name_and_extension(filename: str) -> tuple[str, str]:
    name = PurePosixPath(filename.replace("\\", "/")).name.lower()
    return name, name.rpartition(".")[2] if "." in name.lstrip(".") else ""


def _media_type(content_type: str | None) -> str:
    return (content_type or "").partition(";")[0].strip().lower()


def _unsupported(filename: str, content_type: str | None) -> UnsupportedFileError:
    _, extension = _name_and_extension(filename)
    shown = f".{extension}" if extension else (_media_type(content_type) or "unknown")
    return UnsupportedFileError(
        f"File type not supported: {filename!r} ({shown}). Supported types for file search: "
        "text, Markdown, HTML, JSON, PDF, DOCX, PPTX and source code files."
    )


_TEXT_KINDS = frozenset({"text", "html", "json"})
# The most bytes one character takes in the encodings read (UTF-8, UTF-16, UTF-32), and a BOM.
_MAX_CHAR_BYTES = 4
_MAX_BOM_BYTES = 4


def _head(source: Source, size: int = 1024) -> bytes:
    if isinstance(source, bytes):
        return source[:size]
    with source.open("rb") as handle:
        return handle.read(size)


def _read_text_source(source: Source, limits: ExtractionLimits) -> bytes:
    """The bytes of a text file, refused unread when they are sure to decode to more
    characters than ``max_output_chars`` (every character takes at most 4 bytes)."""
    size = len(source) if isinstance(source, bytes) else source.stat().st_size
    limits.check_output((size - _MAX_BOM_BYTES) // _MAX_CHAR_BYTES)
    return source if isinstance(source, bytes) else source.read_bytes()


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
    except RecursionError:
        raise ExtractionError("The JSON file is nested too deeply to be read.") from None
    try:
        return json.dumps(value, indent=2, ensure_ascii=False)
    except RecursionError:
        raise ExtractionError("The JSON file is nested too deeply to be read.") from None


_EXTRACTORS: dict[str, Callable[[bytes], str]] = {
    "text": _extract_plain,
    "html": _extract_html,
    "json": _extract_json,
}
