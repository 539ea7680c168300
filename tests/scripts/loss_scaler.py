#!/usr/bin/env python3
"""tests/scripts/loss_scaler.py: megatron-core's DynamicGradScaler on scripted sequences of
overflows and clean steps, the reference tests/data/loss_scaler_megatron.txt holds (and
tests/test_loss_scaler.cpp's LossScaler tests hold paralab's model/loss_scaler.cpp to).

  python tests/scripts/loss_scaler.py            prints the trajectories
  python tests/scripts/loss_scaler.py --check F  exits 1 unless F is exactly what it prints

megatron-core creates the scaler's tensors with device='cuda'; on a machine without a GPU the
module's torch is replaced by one whose tensor() drops the device argument (the arithmetic is
the same fp32 tensor arithmetic on the CPU).

The file: per case a line "case NAME initial min window hysteresis", then one line per step,
"found_inf scale growth_tracker hysteresis_tracker" (the state after the step's update; the
scale as the exact fp32 value, %.9g).
"""
import sys
import types

import torch
import megatron.core.optimizer.grad_scaler as grad_scaler


def _tensor(*args, device=None, **kwargs):  # the device argument dropped: the CPU's tensor
    return torch.tensor(*args, **kwargs)


grad_scaler.torch = types.SimpleNamespace(
    **{k: getattr(torch, k) for k in dir(torch) if not k.startswith("__")})
grad_scaler.torch.tensor = _tensor


def pattern(n, seed, every):
    """A deterministic sequence of n found_inf values: an overflow where an LCG says so (about
    one step in `every`), with runs of clean steps and of overflows."""
    x, out = seed, []
    for _ in range(n):
        x = (x * 6364136223846793005 + 1442695040888963407) % 2**64
        out.append((x >> 33) % every == 0)
    return out


# (name, initial, min, window, hysteresis, found_inf sequence)
CASES = [
    # the issue's: from 2^32 with hysteresis 2, overflow, clean, overflow, overflow
    ("issue", 2.0**32, 1.0, 1000, 2, [True, False, True, True]),
    # Megatron's defaults from 2^32: the first run of overflows, then clean steps
    ("defaults", 2.0**32, 1.0, 1000, 2, [True] * 40 + [False] * 1001 + [True, False, True]),
    # a short window: growth refills the hysteresis
    ("window3", 2.0**16, 1.0, 3, 2, pattern(300, 1, 3)),
    ("window5_h1", 2.0**10, 1.0, 5, 1, pattern(300, 2, 4)),
    ("window2_h3", 2.0**20, 1.0, 2, 3, pattern(300, 3, 2)),
    # the floor: a min_loss_scale that is not a power of two, reached by back-off
    ("min3", 64.0, 3.0, 4, 1, [True] * 10 + pattern(200, 4, 3)),
    # an initial scale that is not a power of two (rounded to fp32 as megatron does)
    ("initial1e5", 1e5, 0.5, 7, 2, pattern(300, 5, 5)),
]


def trajectories():
    lines = []
    for name, initial, min_scale, window, hysteresis, found in CASES:
        s = grad_scaler.DynamicGradScaler(initial_scale=initial, min_scale=min_scale,
                                          growth_factor=2.0, backoff_factor=0.5,
                                          growth_interval=window, hysteresis=hysteresis)
        lines.append("case %s %.17g %.17g %d %d" % (name, initial, min_scale, window, hysteresis))
        for f in found:
            s.update(f)
            st = s.state_dict()
            lines.append("%d %.9g %d %d" % (f, st["scale"].item(), st["growth_tracker"],
                                            st["hysteresis_tracker"]))
    return "\n".join(lines) + "\n"


def main():
    text = trajectories()
    if len(sys.argv) == 3 and sys.argv[1] == "--check":
        with open(sys.argv[2]) as f:
            saved = f.read()
        a, b = saved.splitlines(), text.splitlines()
        if saved != text:
            first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
            print("%s differs from megatron-core's DynamicGradScaler at line %d: %r vs %r"
                  % (sys.argv[2], first + 1, a[first] if first < len(a) else None,
                     b[first] if first < len(b) else None))
            print("0 passed, 1 failed")
            return 1
        print("%s: %d steps in %d cases equal megatron-core %s's DynamicGradScaler"
              % (sys.argv[2], len(b) - len(CASES), len(CASES), _version()))
        print("1 passed, 0 failed")
        return 0
    sys.stdout.write(text)
    return 0


def _version():
    try:
        from importlib.metadata import version
        return version("megatron-core")
    except Exception:  # noqa: BLE001
        return "?"


if __name__ == "__main__":
    sys.exit(main())
