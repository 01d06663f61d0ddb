"""kernels.gpus is the one GPU table: occupancy, the time model, the reader targets and the
roofline calculation read the same dicts, so no second copy of a GPU's numbers can drift."""
from __future__ import annotations

import pytest

from andrea_edu.kernels import gpus, occupancy, targets, time_model
from andrea_edu.bench import dispatched


def test_every_reader_of_a_gpu_reads_the_one_table():
    for key, g in occupancy.PRESETS.items():
        assert g is gpus.GPUS[key]
    for key, g in time_model.GPUS.items():
        assert g is gpus.GPUS[key]
    for key, g in targets.READERS.items():
        assert g is gpus.GPUS[key]
    assert occupancy.H200 is time_model.GPUS["H200"] is gpus.GPUS["H200"]


def test_the_roofline_peak_is_the_model_peak():
    """The two peaks that once disagreed (989 in the roofline, 989.5 in the model) are one."""
    for g in gpus.GPUS.values():
        if "tensor_flops" in g:
            row = gpus.PUBLISHED_PEAK[g["name"]]
            assert row["bf16_tflops"] * 1e12 == g["tensor_flops"]
            assert row["hbm_tb_per_s"] * 1e12 == g["dram_bytes_s"]
    assert gpus.PUBLISHED_PEAK["NVIDIA H200"]["bf16_tflops"] == 1979 / 2


def test_clock_and_lookup_name_the_allowed_values():
    assert gpus.clock_hz("H200") == pytest.approx(1.830e9, rel=1e-3)
    with pytest.raises(ValueError, match="cites no tensor peak"):
        gpus.clock_hz("T4")
    with pytest.raises(ValueError, match="is not one of"):
        gpus.get("B200")
    assert gpus.by_device_name("NVIDIA H200") == "H200"
    assert gpus.by_device_name("NVIDIA GeForce RTX 4090") == "RTX 4090"
    assert gpus.by_device_name("Fake GPU (test)") is None


def test_the_h100_sxm_is_first_class_and_matched_by_its_record():
    """Issue 41 item 6: the H100 SXM has its cited peaks, bandwidth, L2 and SMs beside the H200,
    the time model knows it, and a measurement's GPU is found by its whole device record: a
    part of a name (an H100 PCIe, an H200 NVL) or another SM count gets no row."""
    h100, h200 = gpus.GPUS["H100"], gpus.GPUS["H200"]
    assert h100["sms"] == h200["sms"] == 132 and h100["tensor_flops"] == h200["tensor_flops"]
    assert h100["dram_bytes_s"] == 3.35e12 and h200["dram_bytes_s"] == 4.8e12
    assert h100["l2_bytes"] == 50 * 2**20 and h200["l2_bytes"] is None
    assert "H100" in gpus.SOURCES and "H100" in time_model.GPUS
    assert time_model.TENSOR_CEILING["H100"]["flops"] == h100["tensor_flops"]
    assert time_model.PUBLISHED_GPU["H100"] == "H100 SXM5"
    assert gpus.clock_hz("H100") == pytest.approx(gpus.clock_hz("H200"))
    assert gpus.by_device_name("NVIDIA H100 80GB HBM3") == "H100"
    for other in ("NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200 NVL", "H200",
                  "NVIDIA H2000"):
        assert gpus.by_device_name(other) is None, other
    assert gpus.by_device_name("NVIDIA H100 80GB HBM3", sm_count=114) is None
    rec = {"provenance": {"device": "NVIDIA H100 80GB HBM3", "sm_count": 132}}
    assert gpus.by_device(rec) == gpus.by_device(rec["provenance"]) == "H100"
    peak = gpus.published_peak(rec)
    assert peak is not None and peak["hbm_tb_per_s"] == 3.35
    assert gpus.by_device({"provenance": {"device": "NVIDIA H200 NVL", "sm_count": 132}}) is None
    assert gpus.by_device(None) is None and gpus.published_peak({}) is None
    assert dispatched.model_gpu(rec, time_model.GPUS) == "H100"
    assert dispatched.model_gpu({"provenance": {"device": "NVIDIA H200 NVL"}}, time_model.GPUS) is None


def test_the_roofline_names_its_gpu_and_refuses_an_unknown_one():
    """bench.matmuls.projection_roofline: a GPU given by key or torch's name; None: the
    committed GPU measurement's device where the book cites its peak, else the fallback, said."""
    from andrea_edu.bench import matmuls
    r = matmuls.projection_roofline(1024, gpu="H100")
    assert r["gpu"] == "NVIDIA H100 80GB HBM3" and r["gpu_why"] == "asked for"
    assert matmuls.projection_roofline(1024, gpu="NVIDIA H200")["gpu"] == "NVIDIA H200"
    assert r["memory_s"] > matmuls.projection_roofline(1024, gpu="H200")["memory_s"]
    d = matmuls.projection_roofline(1024)
    assert d["gpu"] and d["gpu_why"]
    with pytest.raises(ValueError, match="gpu='T4' has no published peak"):
        matmuls.projection_roofline(1024, gpu="T4")
