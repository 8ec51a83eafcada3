"""``UploadForm``: a multipart upload (``POST /v1/files``) read as it arrives.

The body is fed to python-multipart's streaming parser chunk by chunk; the bytes of the part
named ``file`` are handed on as they are parsed (``file_chunks``, which the blob store writes
to disk), never gathered in memory. The other fields (``purpose``, ``expires_after[...]``) are
small and kept (at most ``MAX_FIELD_BYTES`` each, ``MAX_PARTS`` parts); a field with a check
(``purpose``) is checked as soon as it is complete, so a bad one sent before the file stops the
upload before any of the file is written. Other file parts are read past and dropped.

Limits, each answered as soon as it is passed: the file's bytes over ``limit`` (413), the whole
body over ``limit`` + ``FORM_ALLOWANCE`` (413; a ``content-length`` over it is refused before
anything is read), a field too long or too many parts (400), a body that is not multipart or
ends before its closing boundary (400). The exceptions propagate out of ``file_chunks``, so the
blob store removes what it wrote; a client that goes away raises Starlette's
``ClientDisconnect`` the same way.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field

from python_multipart.exceptions import MultipartParseError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import Request

from app.errors import InvalidRequestError, RequestTooLargeError

MAX_FIELD_BYTES = 64 * 1024
MAX_PARTS = 32
_MAX_HEADER_BYTES = 16 * 1024
# What a body may hold besides the file's bytes: the fields, part headers and boundaries.
FORM_ALLOWANCE = MAX_PARTS * (MAX_FIELD_BYTES + _MAX_HEADER_BYTES)
FILE_FIELD = "file"


@dataclass
class _Part:
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)
    name: str = ""
    role: str = "field"  # "field" | "file" (the upload) | "ignored" (another file part)
    data: bytearray = field(default_factory=bytearray)


def _decode(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return raw.decode("latin-1")


def invalid(detail: str) -> InvalidRequestError:
    return InvalidRequestError(f"Invalid multipart body: {detail}")


def too_large(limit: int) -> RequestTooLargeError:
    return RequestTooLargeError(f"The file exceeds the upload limit of {limit} bytes.")


class UploadForm:
    """One multipart upload; ``file_chunks()`` reads the whole body once."""

    def __init__(
        self,
        request: Request,
        limit: int,
        checks: Mapping[str, Callable[[str], None]] | None = None,
    ) -> None:
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data"):
            raise InvalidRequestError(
                "The request must be multipart/form-data with a 'file' and a 'purpose'.",
                code="invalid_content_type",
            )
        boundary = parse_options_header(content_type)[1].get(b"boundary")
        if not boundary:
            raise invalid("Missing boundary in multipart.")
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > limit + FORM_ALLOWANCE:
            raise too_large(limit)
        self._request = request
        self._boundary = boundary
        self._limit = limit
        self._checks = dict(checks or {})
        self.fields: dict[str, str] = {}
        self.filename: str | None = None  # set once a part named "file" with a filename begins
        self.file_bytes = 0
        self._part = _Part()
        self._header_name = bytearray()
        self._header_value = bytearray()
        self._parts = 0
        self._pieces: list[bytes] = []
        self._file_open = False
        self._ended = False

    async def file_chunks(self) -> AsyncIterator[bytes]:
        """The ``file`` part's bytes as they arrive; the fields are in ``fields`` afterwards."""
        parser = MultipartParser(
            self._boundary,
            {
                "on_part_begin": self._on_part_begin,
                "on_part_data": self._on_part_data,
                "on_part_end": self._on_part_end,
                "on_header_field": self._on_header_field,
                "on_header_value": self._on_header_value,
                "on_header_end": self._on_header_end,
                "on_headers_finished": self._on_headers_finished,
                "on_end": self._on_end,
            },
        )
        received = 0
        async for chunk in self._request.stream():
            received += len(chunk)
            if received > self._limit + FORM_ALLOWANCE:
                raise too_large(self._limit)
            self._write(parser, chunk)
            pieces, self._pieces = self._pieces, []
            for piece in pieces:
                yield piece
        self._write(parser, None)
        if not self._ended or self._file_open:
            raise invalid("the body ends before its closing boundary.")

    def _write(self, parser: MultipartParser, chunk: bytes | None) -> None:
        try:
            if chunk is None:
                parser.finalize()
            else:
                parser.write(chunk)
        except MultipartParseError as exc:
            raise invalid(str(exc) or "the body is not multipart/form-data.") from None

    # python-multipart's callbacks (synchronous, inside ``parser.write``)

    def _on_part_begin(self) -> None:
        self._parts += 1
        if self._parts > MAX_PARTS:
            raise invalid(f"Too many parts. The most is {MAX_PARTS}.")
        self._part = _Part()

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._header_name += data[start:end]
        self._check_header_size()

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._header_value += data[start:end]
        self._check_header_size()

    def _check_header_size(self) -> None:
        if len(self._header_name) + len(self._header_value) > _MAX_HEADER_BYTES:
            raise invalid("a part's header is too long.")

    def _on_header_end(self) -> None:
        self._part.headers.append((bytes(self._header_name).lower(), bytes(self._header_value)))
        self._header_name.clear()
        self._header_value.clear()

    def _on_headers_finished(self) -> None:
        disposition = next((v for k, v in self._part.headers if k == b"content-disposition"), b"")
        options = parse_options_header(disposition)[1]
        if b"name" not in options:
            raise invalid('The Content-Disposition header field "name" must be provided.')
        part = self._part
        part.name = _decode(options[b"name"])
        if b"filename" not in options:
            return
        if part.name != FILE_FIELD:
            part.role = "ignored"
            return
        if self.filename is not None:
            raise invalid("Only one file may be uploaded.")
        part.role = "file"
        self.filename = _decode(options[b"filename"])
        self._file_open = True

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._part
        if part.role == "file":
            self.file_bytes += end - start
            if self.file_bytes > self._limit:
                raise too_large(self._limit)
            self._pieces.append(data[start:end])
        elif part.role == "field":
            if len(part.data) + end - start > MAX_FIELD_BYTES:
                raise invalid(f"Part exceeded maximum size of {MAX_FIELD_BYTES // 1024}KB.")
            part.data += data[start:end]

    def _on_part_end(self) -> None:
        part = self._part
        if part.role == "file":
            self._file_open = False
        elif part.role == "field":
            value = _decode(bytes(part.data))
            self.fields[part.name] = value
            check = self._checks.get(part.name)
            if check is not None:
                check(value)

    def _on_end(self) -> None:
        self._ended = True
