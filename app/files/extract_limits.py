"""What text extraction shares with its extractors: the file's source, the extraction budget
(``ExtractionLimits``) and the errors a file fails with (OpenAI's ``last_error`` codes)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

# A file's bytes, or the path of the file that holds them (read by the extractor itself).
Source = bytes | Path

MIB = 1024 * 1024


class UnsupportedFileError(ValueError):
    """The file's type cannot be searched (OpenAI's ``unsupported_file``)."""

    code = "unsupported_file"


class ExtractionError(ValueError):
    """The file claims a supported type but cannot be read (corrupt, encrypted ...)."""

    code = "invalid_file"


class OverBudgetError(ExtractionError):
    """The file needs more than the extraction budget allows (a decompression bomb, too many
    pages, too much text, too much memory): the same file fails the same way every time."""


class ExtractorFailedError(ExtractionError):
    """The extraction did not finish for a reason that is not the file's alone (its time
    budget ran out on a busy machine, the extractor process died): OpenAI's ``server_error``."""

    code = "server_error"


@dataclass(frozen=True, slots=True)
class ExtractionLimits:
    """The budget of one file's text extraction (the ``[extraction]`` settings).

    ``timeout_seconds``, ``memory_bytes`` and the concurrency are enforced by
    ``ProcessExtractor`` (wall time, the child's address space); the others are checked by the
    extractors before or while they parse.
    """

    timeout_seconds: float = 120.0
    memory_bytes: int = 1024 * MIB
    max_output_chars: int = 20_000_000
    max_concurrency: int = 2
    max_text_concurrency: int = 2
    max_pdf_pages: int = 5_000
    max_unzipped_bytes: int = 256 * MIB
    max_zip_entries: int = 10_000
    max_compression_ratio: int = 200

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ExtractionLimits:
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    def check_output(self, chars: int) -> None:
        """``OverBudgetError`` when ``chars`` characters of text are more than allowed."""
        if chars > self.max_output_chars:
            raise OverBudgetError(
                f"The file's text is longer than the {self.max_output_chars} characters allowed."
            )
