#!/usr/bin/env python3
"""scripts/hf_check.py: does transformers compute what paralab computes on an export?

    python3 scripts/hf_check.py EXPORT_DIR LOGITS_FILE [EXPORT_DIR LOGITS_FILE ...]

EXPORT_DIR is a Hugging Face export (checkpoint/hugging_face.h: config.json and the safetensors),
LOGITS_FILE what tests/tools/hf_logits wrote for it: "tokens" I32 [B, S] and paralab's
"logits" F32 [B S, V]. transformers loads the folder as is (AutoModelForCausalLM, float32,
eval mode, eager attention), runs the same tokens, and the checks are:
  load     every tensor of the class was in the folder and every tensor of the folder was
           used (a missing one would be left at its random initialisation)
  logits   max|paralab - hf| / max|hf| <= 1e-4
One line per check, PASS or FAIL with the export's folder and the numbers (several pairs: one
torch import for all); exit 1 when one fails, 2 on bad input.
Without torch or transformers: "SKIP: transformers not importable", exit 0.
Standard library, torch and transformers only; the safetensors file is read here.
"""
import json
import struct
import sys

TOLERANCE = 1e-4


def read_safetensors(path, torch):
    """{name: tensor} of an F32 / I32 safetensors file (the format's header, then the buffer)."""
    dtypes = {"F32": torch.float32, "I32": torch.int32}
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    header.pop("__metadata__", None)
    out = {}
    for name, t in header.items():
        begin, end = t["data_offsets"]
        raw = bytearray(data[8 + n + begin:8 + n + end])
        out[name] = torch.frombuffer(raw, dtype=dtypes[t["dtype"]]).reshape(t["shape"])
    return out


def check(folder, logits_file, torch, transformers):
    """The two checks of one export; the number that failed, or None on bad input."""
    try:
        ours = read_safetensors(logits_file, torch)
        tokens, logits = ours["tokens"].long(), ours["logits"].double()
    except (OSError, KeyError, ValueError, RuntimeError) as e:
        print(f"hf_check.py: {logits_file}: {e}", file=sys.stderr)
        return None

    # transformers 5 names the load dtype `dtype`, 4 `torch_dtype`
    major = int(transformers.__version__.split(".")[0])
    dtype_arg = {"dtype" if major >= 5 else "torch_dtype": torch.float32}
    model, info = transformers.AutoModelForCausalLM.from_pretrained(
        folder, attn_implementation="eager", output_loading_info=True, **dtype_arg)
    model.eval()
    name = f"{folder}: {type(model).__name__} ({model.config.model_type}), transformers " \
           f"{transformers.__version__}"
    failed = 0

    unused = {k: v for k, v in info.items() if v}
    ok = not unused
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'} load: {name}: "
          + ("every tensor loaded, none left over" if ok else f"{unused}"))

    B, S = tokens.shape
    with torch.no_grad():
        hf = model(input_ids=tokens).logits.double().reshape(B * S, -1)
    if hf.shape != logits.shape:
        print(f"FAIL logits: {folder}: transformers gives {list(hf.shape)}, paralab "
              f"{list(logits.shape)}")
        return failed + 1
    scale = hf.abs().max().item()
    err = (logits - hf).abs().max().item() / scale
    ok = err <= TOLERANCE
    failed += not ok
    print(f"{'PASS' if ok else 'FAIL'} logits: {folder}: max|paralab - hf| / max|hf| = {err:.2e} "
          f"{'<=' if ok else '>'} {TOLERANCE:.0e} (B {B}, S {S}, V {hf.shape[1]}, "
          f"max|hf| {scale:.3f})")
    return failed


def main(argv):
    pairs = argv[1:]
    if not pairs or len(pairs) % 2:
        print("usage: hf_check.py EXPORT_DIR LOGITS_FILE [EXPORT_DIR LOGITS_FILE ...]",
              file=sys.stderr)
        return 2
    try:
        import torch
        import transformers
    except ImportError:
        print("SKIP: transformers not importable")
        return 0
    failed = 0
    for folder, logits_file in zip(pairs[::2], pairs[1::2]):
        result = check(folder, logits_file, torch, transformers)
        if result is None:
            return 2
        failed += result
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
