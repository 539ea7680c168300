#!/usr/bin/env python3
"""kernels/emulator/resources.py: each kernel's registers, static shared memory and local memory
for sm_90, from the ptxas reports the nvcc build keeps beside its objects (*.cu.o.ptxas, written
with -Xptxas -v), one line per kernel: "mangled-name registers shared-bytes local-bytes".

    python3 kernels/emulator/resources.py build/cuda/kernels/cuda > build/emulated/kernel_resources.txt

Prints nothing when there is no nvcc build: the kernel table then says the registers are unknown.
The local bytes are the stack frame plus the spill stores (what lives in local memory).
"""
import glob
import os
import re
import sys

ENTRY = re.compile(r"Compiling entry function '(\S+)' for 'sm_90'")
FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores")
USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def kernels(report):
    name, frame = None, 0
    for line in report:
        m = ENTRY.search(line)
        if m:
            name, frame = m.group(1), 0
            continue
        if name is None:
            continue
        m = FRAME.search(line)
        if m:
            frame = int(m.group(1)) + int(m.group(2))
            continue
        m = USED.search(line)
        if m:
            yield name, int(m.group(1)), int(m.group(2) or 0), frame
            name = None


def main():
    folder = sys.argv[1] if len(sys.argv) > 1 else "build/cuda/kernels/cuda"
    for path in sorted(glob.glob(os.path.join(folder, "*.ptxas"))):
        with open(path) as f:
            for name, registers, shared, local in kernels(f):
                print(name, registers, shared, local)


if __name__ == "__main__":
    main()
