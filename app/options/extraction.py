"""``[extraction]``: the budget of each uploaded file's text extraction (file search).

Every file attached to a vector store has its text extracted in a child process of its own
(``app.files.extract_process``), killed when it runs out of time, limited in memory by the
kernel, and refused early when its structure is over a limit (a decompression bomb, too many
pages). A file over budget fails (its vector store file is ``failed`` with ``last_error``);
the gateway and the other files go on.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from app.files.extract import MIB, ExtractionLimits


class ExtractionSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # Wall time of one file's extraction; the child is killed past it (server_error).
    timeout_seconds: float = Field(default=120.0, gt=0, le=3600)
    # Memory the extraction may allocate (the child's address space, RLIMIT_AS, on top of
    # what the Python interpreter maps at start); past it the file fails (invalid_file).
    memory_mb: int = Field(default=1024, ge=64)
    # Characters of text one file may give (OpenAI allows 5,000,000 tokens, about 20 M chars).
    max_output_chars: int = Field(default=20_000_000, ge=1)
    # Documents (PDF, DOCX, PPTX, and files whose kind only their bytes tell) extracted at once.
    max_concurrency: int = Field(default=2, ge=1, le=64)
    # Text files (text, Markdown, HTML, JSON, code) extracted at once, in a lane of their own.
    max_text_concurrency: int = Field(default=2, ge=1, le=64)
    # PDF: pages (checked before the first page is read).
    max_pdf_pages: int = Field(default=5_000, ge=1)
    # DOCX / PPTX (zip files): the total size the entries declare uncompressed, the number of
    # entries, and how many times an entry over 1 MiB may expand (a decompression bomb).
    max_unzipped_mb: int = Field(default=256, ge=1)
    max_zip_entries: int = Field(default=10_000, ge=1)
    max_compression_ratio: int = Field(default=200, ge=1)

    def limits(self) -> ExtractionLimits:
        """The budget as the files feature takes it."""
        return ExtractionLimits(
            timeout_seconds=self.timeout_seconds,
            memory_bytes=self.memory_mb * MIB,
            max_output_chars=self.max_output_chars,
            max_concurrency=self.max_concurrency,
            max_text_concurrency=self.max_text_concurrency,
            max_pdf_pages=self.max_pdf_pages,
            max_unzipped_bytes=self.max_unzipped_mb * MIB,
            max_zip_entries=self.max_zip_entries,
            max_compression_ratio=self.max_compression_ratio,
        )
