"""The one GPU table: every GPU the book names, its SMs, per-SM limits, peaks and clock, cited.

Read by kernels.occupancy (blocks per SM, grid fill), kernels.time_model (the MODEL's
limits), kernels.targets (what runs on a reader's GPU) and the chapters' roofline calculation
(bench.matmuls.projection_roofline reads PUBLISHED_PEAK). Nothing else states a GPU's numbers.

    GPUS {"H200": {...}, "RTX 4090": {...}, ...}   one dict per GPU (keys below)
    get(key) -> dict                              a one-line ValueError naming the keys otherwise
    clock_hz(key) -> the clock behind the stated dense tensor peak (GPUs with a peak only)
    by_device_name("NVIDIA H200", sm_count=None) -> "H200" or None   (torch's whole name)
    by_device(provenance) -> key or None          a measurement's record: name and SM count
    published_peak(provenance) -> PUBLISHED_PEAK's entry for it, or None
    PUBLISHED_PEAK {"NVIDIA H200": {bf16_tflops, hbm_tb_per_s, source}, ...}   the GPUs with a
                                                  cited peak, in TFLOP/s and TB/s

Keys of each GPU:
    name, arch, sms                                 what it is
    regs, smem, smem_per_block, reserved_smem,      per-SM limits (bytes), the occupancy rules'
    max_threads, max_blocks                         inputs
  and, for the GPUs the time model knows (H200, H100 SXM, RTX 4090), published peaks and
  per-SM rates (l2_bytes and memory_bytes where a source states them, else None):
    tensor_flops                dense fp16/bf16 tensor peak with fp32 accumulation (FLOP/s)
    tensor_flops_per_clock_per_sm   the per-SM rate behind it; clock_hz = peak / (sms x rate)
    dram_bytes_s                DRAM bandwidth (bytes/s)
    issue_per_clock, smem_bytes_per_clock, mufu_per_clock   per-SM rates of the model's terms

Sources. Per-SM limits: CUDA C++ Programming Guide, "Technical Specifications per Compute
Capability" (7.5: 64 KB shared memory per SM and per block, 1024 threads, 16 blocks; 8.0: 164 KB,
163 KB per block, 2048 threads, 32 blocks; 8.6: 100 KB, 99 KB per block, 1536 threads, 16 blocks;
8.9: as 8.6 with 24 blocks; 9.0: 228 KB, 227 KB per block, 2048 threads, 32 blocks; 64 K 32-bit
registers per SM throughout); the 1 KB of shared memory reserved per block begins with compute
capability 8.0. SM counts: NVIDIA's data sheets and architecture whitepapers (T4/TU104 40,
A100 108, RTX 3090/GA102 82, L4/AD104 58, RTX 4090/AD102 128, H100 SXM5 and H200/GH100 132).
Peaks: see the comments at H100, H200 and RTX 4090.
"""
from __future__ import annotations

from typing import Any

# Per-SM limits by compute capability (the Programming Guide's table), shared by GPUs of one cc.
_CC75: dict[str, Any] = dict(regs=65536, smem=64 * 1024, smem_per_block=64 * 1024,
                             reserved_smem=0, max_threads=1024, max_blocks=16)
_CC80: dict[str, Any] = dict(regs=65536, smem=164 * 1024, smem_per_block=163 * 1024,
                             reserved_smem=1024, max_threads=2048, max_blocks=32)
_CC86: dict[str, Any] = dict(regs=65536, smem=100 * 1024, smem_per_block=99 * 1024,
                             reserved_smem=1024, max_threads=1536, max_blocks=16)
_CC89: dict[str, Any] = dict(_CC86, max_blocks=24)
_CC90: dict[str, Any] = dict(regs=65536, smem=228 * 1024, smem_per_block=227 * 1024,
                             reserved_smem=1024, max_threads=2048, max_blocks=32)

# CUDA C++ Programming Guide: an SM of compute capability 8.9 or 9.0 has 4 warp schedulers, each
# issuing one instruction per clock; shared memory has 32 banks of 4 bytes, each serving one
# 32-bit word per clock (128 bytes per clock per SM); "Arithmetic Instructions" throughput
# table: 16 results per clock per SM for exp2 (MUFU).
_RATES: dict[str, Any] = dict(issue_per_clock=4, smem_bytes_per_clock=128, mufu_per_clock=16)

GPUS: dict[str, dict[str, Any]] = {
    "T4": dict(name="NVIDIA T4", arch="sm_75", sms=40, **_CC75),
    "A100": dict(name="NVIDIA A100", arch="sm_80", sms=108, **_CC80),
    "RTX 3090": dict(name="NVIDIA GeForce RTX 3090", arch="sm_86", sms=82, **_CC86),
    "L4": dict(name="NVIDIA L4", arch="sm_89", sms=58, **_CC89),
    "RTX 4090": dict(
        name="NVIDIA GeForce RTX 4090", arch="sm_89", sms=128, **_CC89,
        # NVIDIA Ada GPU Architecture whitepaper (AD102, RTX 4090): 128 SMs; peak FP16 tensor
        # TFLOPS with FP32 accumulate 165.2 (dense) at its 2,520 MHz boost clock, i.e. 512
        # FLOPs per clock per SM (half the FP16-accumulate rate); memory 1,008 GB/s.
        tensor_flops=165.2e12, tensor_flops_per_clock_per_sm=512, dram_bytes_s=1.008e12,
        **_RATES),
    "H100": dict(
        name="NVIDIA H100 80GB HBM3", arch="sm_90", sms=132, **_CC90,
        # H100 datasheet (nvidia.com/en-us/data-center/h100, the H100 SXM column): BF16 tensor
        # core 1,979 TFLOPS *with sparsity*, so 989.5 TFLOPS dense; GPU memory 80 GB, bandwidth
        # 3.35 TB/s. NVIDIA H100 Tensor Core GPU Architecture whitepaper: the H100 SXM5 has
        # 132 SMs and 50 MB of L2 cache; the per-SM rate as for the H200 below (same GH100 SM).
        # The PCIe and NVL parts have other SM counts, clocks and bandwidth: not this entry
        # (`by_device` matches the SXM part's exact name and SM count only).
        tensor_flops=989.5e12, tensor_flops_per_clock_per_sm=4096, dram_bytes_s=3.35e12,
        l2_bytes=50 * 1024 * 1024, memory_bytes=80 * 10**9, **_RATES),
    "H200": dict(
        name="NVIDIA H200", arch="sm_90", sms=132, **_CC90,
        # H200 datasheet (nvidia.com/en-us/data-center/h200, the SXM form): FP16/BF16 tensor
        # core 1,979 TFLOPS *with sparsity*, so 989.5 TFLOPS dense; GPU memory bandwidth
        # 4.8 TB/s. SMs: NVIDIA H100 Tensor Core GPU Architecture whitepaper (GH100 in SXM5:
        # 132 SMs; the H200 is the same GH100 with HBM3e). Per-SM rate: the A100 whitepaper
        # gives an A100 SM 1,024 dense FP16 FMA per clock; the H100 whitepaper gives an H100 SM
        # twice A100's dense MMA rate clock for clock: 2,048 FMA = 4,096 FLOPs per clock per SM.
        # So the peak is 132 x 4,096 x 1.83 GHz (NVIDIA's cudnn-frontend benchmark table,
        # PR #650, states the same product for sm90).
        # L2: the H200 datasheet states none; the GH100 of the H100 SXM5 has 50 MB (whitepaper),
        # and torch on this workplace's lent H200 reported 60 MB (a reading, not a citation):
        # left out here (None), the bench reads the device's own L2 size at run time.
        tensor_flops=989.5e12, tensor_flops_per_clock_per_sm=4096, dram_bytes_s=4.8e12,
        l2_bytes=None, memory_bytes=141 * 10**9, **_RATES),
}
SOURCES = {
    "limits": "CUDA C++ Programming Guide, Technical Specifications per Compute Capability",
    "H200": "NVIDIA H200 Tensor Core GPU data sheet; NVIDIA H100 Tensor Core GPU Architecture "
            "whitepaper",
    "H100": "NVIDIA H100 Tensor Core GPU data sheet (SXM); NVIDIA H100 Tensor Core GPU "
            "Architecture whitepaper",
    "RTX 4090": "NVIDIA Ada GPU Architecture whitepaper",
}


def clock_hz(key: str) -> float:
    """The clock at which the stated dense tensor peak is reached: peak / (SMs x per-SM tensor
    FLOPs per clock). 1.830 GHz for the H200, 2.521 GHz for the RTX 4090."""
    g = get(key)
    if "tensor_flops" not in g:
        raise ValueError(f"gpu={key!r}: the book cites no tensor peak for it; GPUs with one: "
                         f"{', '.join(k for k, v in GPUS.items() if 'tensor_flops' in v)}")
    return float(g["tensor_flops"]) / (g["sms"] * g["tensor_flops_per_clock_per_sm"])


def get(key: str) -> dict[str, Any]:
    if key not in GPUS:
        raise ValueError(f"gpu={key!r} is not one of {', '.join(map(repr, GPUS))}")
    return GPUS[key]


def by_device_name(device: str, sm_count: int | None = None) -> str | None:
    """The table's key for a device as torch names it (torch.cuda.get_device_name: "NVIDIA H200"
    -> "H200", "NVIDIA H100 80GB HBM3" -> "H100"), or None. The whole name must be the entry's
    `name` (never a part of it: "NVIDIA H100 PCIe" or "NVIDIA H200 NVL" are other parts, with
    other peaks); `sm_count`, when given (a results file's provenance records it), must be the
    entry's too."""
    if not isinstance(device, str):
        return None
    hits = [k for k, g in GPUS.items() if g["name"] == device.strip()]
    if not hits or (sm_count is not None and GPUS[hits[0]]["sms"] != sm_count):
        return None
    return hits[0]


def by_device(record) -> str | None:
    """The table's key for the device a measurement's record names, or None: `record` is a
    results file's provenance (or the whole file, or a pipeline timing's provenance): its
    "device" name matched whole, and its "sm_count" where it records one."""
    if not isinstance(record, dict):
        return None
    prov = record.get("provenance", record)
    if not isinstance(prov, dict):
        return None
    sms = prov.get("sm_count")
    return by_device_name(prov.get("device", ""), sms if isinstance(sms, int) else None)


def published_peak(record) -> dict[str, Any] | None:
    """PUBLISHED_PEAK's entry for the device a record names (by_device), or None."""
    key = by_device(record)
    return PUBLISHED_PEAK.get(GPUS[key]["name"]) if key else None


for _k, _g in GPUS.items():     # stored too, for readers of the table; clock_hz() defines it
    if "tensor_flops" in _g:
        _g["clock_hz"] = clock_hz(_k)


# The same published figures (not measurements) in the units a roofline states them: the dense
# bf16 tensor peak and the DRAM bandwidth, keyed by the device name torch reports (NVIDIA's H200
# data sheet: 1,979 TFLOP/s *with sparsity*, so 989.5 dense; 4.8 TB/s; the H100 SXM's: the same
# 989.5 dense, 3.35 TB/s).
PUBLISHED_PEAK: dict[str, dict[str, Any]] = {
    g["name"]: {"bf16_tflops": g["tensor_flops"] / 1e12, "hbm_tb_per_s": g["dram_bytes_s"] / 1e12,
                "source": SOURCES[key]}
    for key, g in GPUS.items() if "tensor_flops" in g}
