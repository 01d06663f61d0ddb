"""CompiledKernel.sass() keeps each listing on disk, named by the CUBIN's hash, and never trusts
an empty or cut file."""
from __future__ import annotations

import pytest
import torch

from andrea_edu.kernels import nvrtc
from andrea_edu.kernels.toolkit import find_binary

pytestmark = pytest.mark.skipif(find_binary("cuobjdump") is None or find_binary("nvdisasm") is None,
                                reason="cuobjdump/nvdisasm wheels are not installed")


def _fresh_kernel(monkeypatch, tmp_path):
    monkeypatch.setenv("ANDREA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(nvrtc, "_MEMORY", {})
    return nvrtc.compile_attention("v2", 64, torch.float16, arch="sm_90")


def test_listing_is_written_once_and_read_back(monkeypatch, tmp_path):
    text = _fresh_kernel(monkeypatch, tmp_path).sass()
    files = list((tmp_path / "sass").glob("*.sass"))
    assert text and "HMMA" in text and len(files) == 1
    assert files[0].read_text() == nvrtc._sass_sealed(text)  # the listing, then its sha256
    calls = []
    real_run = nvrtc.subprocess.run

    def recording_run(*a, **k):
        calls.append(a)
        return real_run(*a, **k)

    monkeypatch.setattr(nvrtc.subprocess, "run", recording_run)
    again = _fresh_kernel(monkeypatch, tmp_path).sass()  # a new process would start like this
    assert again == text and calls == []  # read from disk, cuobjdump not run


@pytest.mark.parametrize("damage", ["", "cut in the mid", "half", "half+seal", "unsealed"])
def test_damaged_listing_is_disassembled_again(monkeypatch, tmp_path, damage):
    """Issue 42 item 8: a listing cut in half still names its Function and half its HMMAs; it
    is disassembled again, never counted (the seal is the whole listing's sha256)."""
    text = _fresh_kernel(monkeypatch, tmp_path).sass()
    (path,) = (tmp_path / "sass").glob("*.sass")
    half = text[: len(text) // 2]
    assert "Function" in half and half.count("HMMA") < text.count("HMMA")
    path.write_text({"half": half, "unsealed": text,
                     "half+seal": half + path.read_text()[len(text):]}.get(damage, damage))
    assert _fresh_kernel(monkeypatch, tmp_path).sass() == text
    assert path.read_text() == nvrtc._sass_sealed(text)


def test_evidence_is_kept_on_disk_and_a_damaged_entry_is_walked_again(monkeypatch, tmp_path):
    """sass.evidence stores each walk beside the kernel cache: a second process reads it without
    walking the SASS again; an entry cut short is walked again and rewritten."""
    from andrea_edu.kernels import sass

    _fresh_kernel(monkeypatch, tmp_path)
    first = sass.evidence("v2", 64, torch.float16, "sm_90")
    (entry,) = (tmp_path / "evidence").glob("*.json")
    monkeypatch.setattr(nvrtc, "_MEMORY", {})
    walked: list[tuple] = []
    real = sass._evidence

    def walk(*a):
        walked.append(a)
        return real(*a)

    monkeypatch.setattr(sass, "_evidence", walk)
    assert sass.evidence("v2", 64, torch.float16, "sm_90") == first and walked == []
    entry.write_text(entry.read_text()[:40])
    assert sass.evidence("v2", 64, torch.float16, "sm_90") == first and len(walked) == 1
    assert entry.read_text().startswith("{") and len(entry.read_text()) > 40
