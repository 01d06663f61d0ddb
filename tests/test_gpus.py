"""kernels.gpus is the one GPU table: occupancy, the time model, the reader targets and the
roofline calculation read the same dicts, so no second copy of a GPU's numbers can drift."""
from __future__ import annotations

import pytest

from andrea_edu.kernels import gpus, occupancy, targets, time_model


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
