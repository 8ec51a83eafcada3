from __future__ import annotations

import codecs
import io
import json
import os
import zipfile
from pathlib import Path

import pytest

from app.files.extract import (
    ExtractionError,
    ExtractionLimits,
    OverBudgetError,
    UnsupportedFileError,
    declared_kind,
    decode_text,
    extract_text,
    file_kind,
)
from tests.files.fixtures import make_fixtures

FIXTURES = Path(__file__).parent / "fixtures"


def extract_fixture(name: str, content_type: str | None = None) -> str:
    return extract_text((FIXTURES / name).read_bytes(), filename=name, content_type=content_type)


def test_txt() -> None:
    assert extract_fixture("sample.txt") == (
        "The lighthouse keeper logs every passing ship.\n"
        "Fog horns sound twice a minute when visibility drops below one mile.\n"
    )


def test_markdown_is_text() -> None:
    text = extract_fixture("sample.md")
    assert text.startswith("# Harbor handbook\n\n## Tides\n")
    assert "**12 hours and 25 minutes**" in text
    assert 'print("mind the gap")' in text


def test_html_visible_text_with_block_breaks() -> None:
    text = extract_fixture("sample.html")
    assert text == (
        "Harbor news & notices\n\n"
        "The new pier opens on Monday.\n\n"
        "Fishing permits\nare renewed in April.\n\n"
        "Ferry schedule\nCrane repairs\n\n"
        "Berth\tVessel\n3\tMarlin\n\n"
        "  keep\n    indentation\n\n"
        "Harbor map Café opens at 7."
    )
    for hidden in ("secret", "color", "JavaScript", "Organization"):
        assert hidden not in text


def test_html_title_kept_when_the_body_does_not_repeat_it() -> None:
    html = b"<html><head><title>Tide  tables</title></head><body><p>Low at 6.</p></body></html>"
    assert extract_text(html, filename="t.htm") == "Tide tables\n\nLow at 6."


def test_html_without_closing_tags() -> None:
    html = b"<p>one<p>two<li>three<br>four &lt;5&gt;"
    assert extract_text(html, filename="x.html") == "one\n\ntwo\nthree\nfour <5>"


def test_json_pretty_printed() -> None:
    text = extract_fixture("sample.json")
    assert json.loads(text)["cargo"] == {"kind": "timber", "tons": 42.5}
    assert '  "vessel": "Marlin",\n' in text
    assert '"note": "Überseehafen"' in text  # not \\u-escaped


def test_invalid_json_is_an_extraction_error() -> None:
    with pytest.raises(ExtractionError, match="not valid JSON"):
        extract_text(b'{"a": ', filename="broken.json")


def test_pdf_pages_joined_by_blank_lines() -> None:
    assert extract_fixture("sample.pdf") == (
        "Quarterly report for the lighthouse project.\n"
        "Revenue grew 12 percent in spring.\n\n"
        "Second page: the harbor crane was repaired.\n"
        "Contact: ops@example.com"
    )


def test_docx_paragraphs_and_table_cells_in_order() -> None:
    assert extract_fixture("sample.docx") == (
        "Harbor maintenance plan\n\n"
        "The crane inspection happens every March.\n\n"
        "Asset | Owner\nCrane | Dock team\nBudget approved\n\n"
        "Questions go to the harbor master."
    )


def test_pptx_slides_in_numeric_order() -> None:
    assert extract_fixture("sample.pptx") == (
        "Lighthouse roadmap\nPhase one: new lamps\n\nPhase two: solar panels"
    )


def test_fixture_script_writes_what_is_committed(tmp_path: Path) -> None:
    make_fixtures.main(tmp_path)
    for name in ("sample.pdf", "sample.docx", "sample.pptx"):
        fresh = extract_text((tmp_path / name).read_bytes(), filename=name)
        assert fresh == extract_fixture(name)
    # The PDF is written byte for byte the same every time.
    assert (tmp_path / "sample.pdf").read_bytes() == (FIXTURES / "sample.pdf").read_bytes()


@pytest.mark.parametrize(
    ("name", "data"),
    [
        ("broken.pdf", b"%PDF-1.4\nthis is not a pdf at all"),
        ("truncated.pdf", make_fixtures.pdf_bytes()[:200]),
        ("broken.docx", b"PK\x03\x04 not a zip"),
        ("plain.docx", b"just text"),
        ("empty.docx", b""),
        ("broken.pptx", b"PK\x03\x04 not a zip"),
    ],
)
def test_corrupt_files_are_extraction_errors(name: str, data: bytes) -> None:
    with pytest.raises(ExtractionError):
        extract_text(data, filename=name)


def test_zip_that_is_not_a_docx() -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "hi")
    with pytest.raises(ExtractionError, match="DOCX"):
        extract_text(buffer.getvalue(), filename="x.docx")
    with pytest.raises(ExtractionError, match="no slides"):
        extract_text(buffer.getvalue(), filename="x.pptx")


@pytest.mark.parametrize("name", ["bomb.docx", "bomb.pptx"])
def test_zip_bombs_are_refused(name: str) -> None:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("ppt/slides/slide1.xml", b" " * 20_000)
    assert len(buffer.getvalue()) < 1_000
    with pytest.raises(OverBudgetError, match="expands to 20000 bytes, more than the 10000"):
        extract_text(
            buffer.getvalue(), filename=name, limits=ExtractionLimits(max_unzipped_bytes=10_000)
        )


@pytest.mark.parametrize(
    "name", ["photo.png", "archive.zip", "legacy.doc", "movie.mp4", "app.exe", "sheet.xlsx"]
)
def test_unsupported_types(name: str) -> None:
    with pytest.raises(UnsupportedFileError, match="File type not supported") as info:
        extract_text(b"\x89PNG\r\n\x1a\n\x00\x00", filename=name)
    assert info.value.code == "unsupported_file"
    assert isinstance(info.value, ValueError)


@pytest.mark.parametrize(
    ("name", "content_type", "kind"),
    [
        ("notes.TXT", None, "text"),
        ("main.py", None, "text"),
        ("app.ts", None, "text"),
        ("data.csv", "application/octet-stream", "text"),
        ("config.yaml", None, "text"),
        ("dir/Page.HTM", None, "html"),
        ("C:\\docs\\report.pdf", None, "pdf"),
        ("upload.bin", "application/pdf", "pdf"),
        ("upload", "text/html; charset=utf-8", "html"),
        ("upload.weird", "text/x-rst", "text"),
        ("upload", "application/json", "json"),
        ("Makefile", None, "text"),
        (".bashrc", None, "text"),
    ],
)
def test_file_kind(name: str, content_type: str | None, kind: str) -> None:
    assert file_kind(name, content_type, b"some text") == kind


def test_sniffing_a_name_without_extension() -> None:
    assert file_kind("upload", None, make_fixtures.pdf_bytes()) == "pdf"
    assert file_kind("upload", None, "héllo wörld".encode()) == "text"
    assert file_kind("upload", None, codecs.BOM_UTF16_LE + "hi".encode("utf-16-le")) == "text"
    assert file_kind("upload", None, ("a" + "é" * 1000).encode()) == "text"  # cut at 1 KiB
    with pytest.raises(UnsupportedFileError):
        file_kind("upload", None, b"\x00\x01\x02binary")
    with pytest.raises(UnsupportedFileError):
        file_kind("upload.xyz", None, b"text")


@pytest.mark.parametrize(
    ("data", "text"),
    [
        (codecs.BOM_UTF8 + "é ok".encode(), "é ok"),
        (codecs.BOM_UTF16_LE + "é ok".encode("utf-16-le"), "é ok"),
        (codecs.BOM_UTF16_BE + "é ok".encode("utf-16-be"), "é ok"),
        (codecs.BOM_UTF32_LE + "é ok".encode("utf-32-le"), "é ok"),
        ("plain é".encode(), "plain é"),
        (b"bad \xff byte", "bad \ufffd byte"),
    ],
)
def test_decode_text(data: bytes, text: str) -> None:
    assert decode_text(data) == text


def test_utf16_file_and_nul_characters_dropped() -> None:
    data = codecs.BOM_UTF16_LE + "col1,col2\n1,2\n".encode("utf-16-le")
    assert extract_text(data, filename="table.csv") == "col1,col2\n1,2\n"
    assert extract_text(b"a\x00b", filename="x.txt") == "ab"


def test_large_text_file() -> None:
    data = ("line of text\n" * 200_000).encode()
    assert len(extract_text(data, filename="big.log")) == len(data)


# ------------------------------------------------------------------------------ the budget's checks
# (in this process; tests/files/test_extract_process.py runs them in the extraction child)


def _zip(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def test_too_many_zip_entries_are_refused_before_parsing() -> None:
    data = _zip({f"ppt/slides/slide{i}.xml": b"<x/>" for i in range(30)})
    with pytest.raises(OverBudgetError, match="has 30 entries, more than the 20 allowed"):
        extract_text(data, filename="deck.pptx", limits=ExtractionLimits(max_zip_entries=20))


def test_an_entry_that_expands_too_many_times_is_a_bomb_but_a_small_one_is_not() -> None:
    bomb = _zip({"ppt/slides/slide1.xml": b" " * 3_000_000})
    with pytest.raises(OverBudgetError, match="more than the 200 times allowed: a decompression"):
        extract_text(bomb, filename="deck.pptx")
    small = make_fixtures.pptx_bytes()  # its entries compress well but are under 1 MiB
    limits = ExtractionLimits(max_compression_ratio=1)
    assert "Lighthouse roadmap" in extract_text(small, filename="deck.pptx", limits=limits)


def test_pdf_pages_and_output_are_limited() -> None:
    pdf = make_fixtures.pdf_bytes()
    with pytest.raises(OverBudgetError, match="The PDF has 2 pages, more than the 1 allowed"):
        extract_text(pdf, filename="r.pdf", limits=ExtractionLimits(max_pdf_pages=1))
    with pytest.raises(OverBudgetError, match="longer than the 50 characters allowed"):
        extract_text(pdf, filename="r.pdf", limits=ExtractionLimits(max_output_chars=50))
    assert extract_text(pdf, filename="r.pdf", limits=ExtractionLimits(max_pdf_pages=2))


def test_text_output_is_limited_and_a_sure_overrun_is_not_read(tmp_path: Path) -> None:
    limits = ExtractionLimits(max_output_chars=10)
    assert extract_text(b"0123456789", filename="a.txt", limits=limits) == "0123456789"
    with pytest.raises(OverBudgetError, match="longer than the 10 characters allowed"):
        extract_text(b"0123456789x", filename="a.txt", limits=limits)
    huge = tmp_path / "huge.txt"
    huge.touch()
    os.truncate(huge, 64 * 2**30)  # 64 GiB, sparse: refused from its size, never read
    with pytest.raises(OverBudgetError):
        extract_text(huge, filename="huge.txt", limits=limits)
    path = tmp_path / "small.txt"
    path.write_bytes(b"y" * 10)
    assert extract_text(path, filename="small.txt", limits=limits) == "y" * 10


def test_deeply_nested_json_is_an_extraction_error() -> None:
    with pytest.raises(ExtractionError, match="nested too deeply"):
        extract_text(b"[" * 100_000 + b"]" * 100_000, filename="deep.json")


@pytest.mark.parametrize(
    ("name", "content_type", "kind"),
    [
        ("a.pdf", None, "pdf"),
        ("upload", "text/plain", "text"),
        ("README", None, "text"),
        ("upload", None, None),  # only the bytes can tell
        ("upload", "application/octet-stream", None),
    ],
)
def test_declared_kind(name: str, content_type: str | None, kind: str | None) -> None:
    assert declared_kind(name, content_type) == kind
    with pytest.raises(UnsupportedFileError):
        declared_kind("photo.png")
