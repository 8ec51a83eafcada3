"""``ProcessExtractor``: each file's text extracted by a child process on a budget.

The real child (``python -m app.files.extract_worker``) runs every test here: the hostile files
of ``tests/files/hostile.py`` fail with a message naming the limit they hit, the child is
killed when its time runs out or its caller is cancelled (checked in /proc: no extraction
process of ours is left), the memory budget fails a file cleanly, and the lanes keep text
files going while documents fill theirs. Tests wait on the processes and the tasks, never on
the clock (the time budgets set here only bound how long a hostile file may run).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.files.extract import (
    MIB,
    ExtractionError,
    ExtractionLimits,
    ExtractorFailedError,
    UnsupportedFileError,
    extract_text,
)
from app.files.extract_process import WORKER_MODULE, ProcessExtractor, child_environment
from tests.files import hostile

FIXTURES = Path(__file__).parent / "fixtures"
# Long enough for a small file on a busy machine, short enough for the tests that run out.
SHORT = 4.0


def extractor_pids() -> set[int]:
    """The extraction children of this process still alive (zombies included: not reaped)."""
    found: set[int] = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        if parent == os.getpid() and WORKER_MODULE.encode() in cmdline:
            found.add(int(entry))
    return found


def process_exists(pid: int) -> bool:
    """A process (a zombie too) with this pid is in /proc."""
    return Path(f"/proc/{pid}").exists()


async def running_extractors(count: int) -> set[int]:
    """Once ``count`` extraction children run, their pids (polled, bounded)."""
    for _ in range(2_000):
        pids = extractor_pids()
        if len(pids) >= count:
            return pids
        await asyncio.sleep(0.01)
    raise AssertionError(f"{count} extraction processes never ran")


@pytest.fixture
async def no_leftover_children() -> AsyncIterator[None]:
    yield
    assert extractor_pids() == set()


async def extract(
    data: bytes | Path, name: str, limits: ExtractionLimits | None = None
) -> str:
    return await ProcessExtractor(limits).extract(data, filename=name, content_type=None)


# ------------------------------------------------------------------------------ normal files


@pytest.mark.parametrize(
    "name", ["sample.txt", "sample.md", "sample.html", "sample.json", "sample.pdf", "sample.docx",
             "sample.pptx"],
)
async def test_the_child_extracts_what_the_extractor_does(
    name: str, no_leftover_children: None
) -> None:
    path = FIXTURES / name
    expected = extract_text(path.read_bytes(), filename=name)
    assert expected
    assert await extract(path.read_bytes(), name) == expected  # bytes through stdin
    assert await extract(path, name) == expected  # the child reads the path itself


async def test_unsupported_and_unreadable_files_keep_their_codes(
    no_leftover_children: None,
) -> None:
    with pytest.raises(UnsupportedFileError, match="File type not supported") as unsupported:
        await extract(b"\x89PNG\r\n\x1a\n", "photo.png")
    assert unsupported.value.code == "unsupported_file"
    with pytest.raises(UnsupportedFileError):  # no extension: the child sniffs the bytes
        await extract(b"\x00\x01\x02 binary", "upload")
    with pytest.raises(ExtractionError, match="not valid JSON") as invalid:
        await extract(b"{", "data.json")
    assert invalid.value.code == "invalid_file"
    with pytest.raises(ExtractionError, match="no longer exists"):
        await extract(FIXTURES / "gone.txt", "gone.txt")


async def test_the_child_sees_none_of_the_gateways_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RESPGATE_UPSTREAM_API_KEY", "sk-secret")
    environment = child_environment()
    assert set(environment) == {"PATH", "PYTHONPATH", "LC_ALL", "PYTHONDONTWRITEBYTECODE"}
    assert "sk-secret" not in str(environment)


# ------------------------------------------------------------------------------ hostile files


@pytest.mark.parametrize(
    ("name", "data", "limits", "message"),
    [
        (
            "bomb.docx",
            hostile.zip_bomb_docx(300),
            ExtractionLimits(),
            "The DOCX file expands to 300",
        ),
        (
            "ratio.docx",
            hostile.zip_bomb_docx(50),
            ExtractionLimits(),
            "more than the 200 times allowed: a decompression bomb.",
        ),
        (
            "nested.docx",
            hostile.nested_docx(30_000),
            ExtractionLimits(),
            "Excessive depth in document: 256",
        ),
        (
            "pages.pdf",
            hostile.page_bomb_pdf(2_000),
            ExtractionLimits(max_pdf_pages=1_000),
            "The PDF has 2000 pages, more than the 1000 allowed.",
        ),
        (
            "flate.pdf",
            hostile.flate_bomb_pdf(100),
            ExtractionLimits(),
            "The PDF is over a limit of the PDF reader: Limit reached while decompressing",
        ),
        (
            "text.pdf",
            hostile.slow_pdf(3, 2_000),
            ExtractionLimits(max_output_chars=50_000),
            "The file's text is longer than the 50000 characters allowed.",
        ),
    ],
)
async def test_hostile_files_fail_fast_naming_the_limit(
    name: str, data: bytes, limits: ExtractionLimits, message: str, no_leftover_children: None
) -> None:
    with pytest.raises(ExtractionError) as failed:
        await extract(data, name, limits)
    assert message in str(failed.value)
    assert failed.value.code == "invalid_file"
    assert len(data) < 1_100_000  # small uploads, as in the review


async def test_a_text_file_sure_to_be_over_the_output_budget_is_not_read(
    tmp_path: Path, no_leftover_children: None
) -> None:
    path = tmp_path / "big.log"
    path.write_bytes(b"x" * 4_100)
    with pytest.raises(ExtractionError, match="longer than the 1000 characters allowed"):
        await extract(path, "big.log", ExtractionLimits(max_output_chars=1_000))


async def test_the_child_is_killed_when_its_time_runs_out(no_leftover_children: None) -> None:
    """A PDF that keeps pypdf busy for minutes: killed at the budget, nothing left behind."""
    limits = ExtractionLimits(timeout_seconds=SHORT)
    task = asyncio.create_task(extract(hostile.slow_pdf(4_000, 4_000), "slow.pdf", limits))
    (pid,) = await running_extractors(1)
    with pytest.raises(ExtractorFailedError, match=f"within the {SHORT:g} seconds allowed") as e:
        await task
    assert e.value.code == "server_error"
    assert not process_exists(pid)  # killed and reaped


async def test_a_cancelled_extraction_kills_its_child(no_leftover_children: None) -> None:
    task = asyncio.create_task(extract(hostile.slow_pdf(4_000, 4_000), "slow.pdf"))
    (pid,) = await running_extractors(1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not process_exists(pid)  # killed and reaped


async def test_the_memory_budget_fails_a_file_cleanly(no_leftover_children: None) -> None:
    """The zip bomb with its checks widened: the child's address space limit stops it."""
    widened = ExtractionLimits(
        memory_bytes=256 * MIB, max_unzipped_bytes=10**10, max_compression_ratio=10**6
    )
    for megabytes in (100, 300):  # one fails in lxml, the other while reading the entry
        with pytest.raises(ExtractionError) as failed:
            await extract(hostile.zip_bomb_docx(megabytes), "bomb.docx", widened)
        assert str(failed.value) == (
            "Extracting the text needed more than the 256 MiB of memory allowed."
        )
        assert failed.value.code == "invalid_file"
    # The same extractor goes on with the next file.
    assert await extract(FIXTURES / "sample.docx", "sample.docx", widened)


async def test_text_files_have_their_own_lane(no_leftover_children: None) -> None:
    """Two slow documents fill the document lane; a text file is extracted meanwhile."""
    extractor = ProcessExtractor(ExtractionLimits(timeout_seconds=SHORT * 5, max_concurrency=2))
    slow = [
        asyncio.create_task(
            extractor.extract(hostile.slow_pdf(4_000, 4_000), filename=f"s{i}.pdf",
                              content_type=None)
        )
        for i in range(2)
    ]
    waiting = asyncio.create_task(
        extractor.extract(FIXTURES / "sample.pdf", filename="sample.pdf", content_type=None)
    )
    await running_extractors(2)
    text = await extractor.extract(b"tide tables", filename="tides.txt", content_type=None)
    assert text == "tide tables"
    assert not any(task.done() for task in [*slow, waiting])  # the documents still run or wait
    for task in [*slow, waiting]:
        task.cancel()
    await asyncio.gather(*slow, waiting, return_exceptions=True)


def test_a_child_that_dies_without_an_answer_is_a_logged_server_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("WARNING", logger="app.files.extract_process")
    with pytest.raises(ExtractorFailedError, match=r"ended unexpectedly \(exit code -11\)") as e:
        ProcessExtractor()._reply(b"", b"Fatal Python error: Segmentation fault", -11, "x.pdf")
    assert e.value.code == "server_error"
    (record,) = caplog.records
    assert record.getMessage() == "text extraction process failed"
    assert (record.file_name, record.exit_code) == ("x.pdf", -11)  # type: ignore[attr-defined]
    assert "Segmentation fault" in record.stderr  # type: ignore[attr-defined]
