#!/usr/bin/env python3
"""FP8 E4M3 / E5M2 codes from an independent implementation, for tests/test_fp8.cpp.

Writes (to stdout, or the file given) the decoded value of every code of both formats and the
codes of a set of float32 inputs: every FP8 value, the midpoint between every two adjacent
values and the float32 values either side of it (round-to-nearest-even's ties), values past
the largest normal, below the smallest subnormal, infinities, NaN, signed zeros, and a sweep of
float32 bit patterns (every 2000003rd). paralab's kernels/fp8.h must give the same codes.

The reference is PyTorch's torch.float8_e4m3fn / torch.float8_e5m2 when torch is importable,
else ml_dtypes' float8_e4m3fn / float8_e5m2 (both round to nearest even). Neither saturates in
the cast paralab copies from CUDA's __NV_SATFINITE: PyTorch's eager casts up to 2.11 let a
finite overflow become NaN (E4M3) or inf (E5M2) (torchao clamps first: torchao/float8/
float8_utils.py), ml_dtypes the same. So, as torchao does, inputs are clamped to +-max before
the cast; NaN is cast as is (both give NaN, E4M3's 0x7F).

Usage: scripts/fp8_reference.py [OUT]   (tests/data/fp8_reference.txt is its output,
tests/scripts/fp8_reference.sh checks the committed file against a fresh run)
"""
import struct
import sys

import numpy as np

try:
    import torch

    LIB = "torch " + torch.__version__

    def cast(values, fmt):
        dtype = torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2
        t = torch.tensor(np.asarray(values, dtype=np.float32))
        return t.to(dtype).view(torch.uint8).numpy().astype(np.uint8)

    def decode(codes, fmt):
        dtype = torch.float8_e4m3fn if fmt == "e4m3" else torch.float8_e5m2
        t = torch.tensor(np.asarray(codes, dtype=np.uint8)).view(dtype)
        return t.to(torch.float32).numpy()

except ImportError:
    import ml_dtypes

    LIB = "ml_dtypes " + ml_dtypes.__version__

    def cast(values, fmt):
        dtype = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
        return np.asarray(values, dtype=np.float32).astype(dtype).view(np.uint8)

    def decode(codes, fmt):
        dtype = ml_dtypes.float8_e4m3fn if fmt == "e4m3" else ml_dtypes.float8_e5m2
        return np.asarray(codes, dtype=np.uint8).view(dtype).astype(np.float32)


MAX = {"e4m3": 448.0, "e5m2": 57344.0}


def bits(x):
    return struct.unpack("<I", struct.pack("<f", float(x)))[0]


def from_bits(u):
    return struct.unpack("<f", struct.pack("<I", u))[0]


def inputs():
    xs = []
    for fmt in ("e4m3", "e5m2"):
        values = decode(np.arange(256, dtype=np.uint8), fmt)
        finite = np.sort(np.unique(values[np.isfinite(values)]))
        xs += list(finite)
        for a, b in zip(finite[:-1], finite[1:]):
            mid = np.float32((np.float64(a) + np.float64(b)) / 2)  # exact: 4 bits of mantissa
            xs += [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(-np.inf))]
        m = MAX[fmt]
        xs += [m * 1.03, m * 1.07, m * 2, m * 1.0e10]
    xs += [1e-30, 2.0**-10, 2.0**-17, 2.0**-18, 3e38, 0.0]
    xs += [-x for x in xs]
    xs += [float("inf"), float("-inf")]
    xs = [bits(np.float32(x)) for x in xs]
    xs += list(range(0, 1 << 32, 2000003))
    out, seen = [], set()
    for u in xs:
        if u not in seen and not (from_bits(u) != from_bits(u)):  # NaNs added once, below
            seen.add(u)
            out.append(u)
    return out + [0x7FC00000]


def main():
    out = open(sys.argv[1], "w") if len(sys.argv) > 1 else sys.stdout
    xs = inputs()
    values = np.array([from_bits(u) for u in xs], dtype=np.float32)
    out.write(f"# scripts/fp8_reference.py with {LIB}: inputs clamped to +-max before the cast\n")
    out.write("# decode CODE E4M3_BITS E5M2_BITS (float32 bits; NaN as 7fc00000)\n")
    dec = {fmt: decode(np.arange(256, dtype=np.uint8), fmt) for fmt in ("e4m3", "e5m2")}
    for c in range(256):
        row = [bits(dec[f][c]) if dec[f][c] == dec[f][c] else 0x7FC00000 for f in ("e4m3", "e5m2")]
        out.write(f"decode {c:02x} {row[0]:08x} {row[1]:08x}\n")
    out.write("# encode FLOAT_BITS E4M3_CODE E5M2_CODE (a NaN code as 7f)\n")
    codes = {}
    for fmt in ("e4m3", "e5m2"):
        m = np.float32(MAX[fmt])
        clamped = np.where(np.isnan(values), values, np.clip(values, -m, m))
        codes[fmt] = cast(clamped, fmt)
    for fmt in ("e4m3", "e5m2"):  # any NaN code is written as 7f (the libraries differ in which)
        codes[fmt] = np.where(np.isnan(dec[fmt][codes[fmt]]), np.uint8(0x7F), codes[fmt])
    for i, u in enumerate(xs):
        out.write(f"encode {u:08x} {codes['e4m3'][i]:02x} {codes['e5m2'][i]:02x}\n")


if __name__ == "__main__":
    main()
