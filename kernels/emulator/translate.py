#!/usr/bin/env python3
"""kernels/emulator/translate.py: the emulated build's one source rewrite of paralab's CUDA files.

    python3 kernels/emulator/translate.py kernels/cuda/norms.cu build/emulated/gen/kernels/cuda/norms.cu

g++ compiles CUDA C++ once two constructs nvcc alone understands are spelled as C++
(kernels/emulator/cuda_language.h provides the rest):

  kernel<<<grid, block, smem, stream>>>(args)
      ->  ::emu::launch(::emu::LaunchConfig(grid, block, smem, stream), EMU_LAUNCH_SITE("kernel"),
                        [](auto&... emu_arg) { kernel(emu_arg...); }, args)
      the arguments evaluated once, every thread calling the kernel on their copies;
  __shared__ T name[N];
      ->  static constexpr ::emu::SharedVariable emu_shared_name{"name"};
          T (&name)[N] = *reinterpret_cast<T (*)[N]>(::emu::shared_variable(emu_shared_name, ...));
      a reference to the bytes the running block gives the variable (one per declaration and
      template instantiation, as nvcc's);
  extern __shared__ T name[];
      ->  T* name = reinterpret_cast<T*>(::emu::dynamic_shared());

Nothing else changes: every other token and every line stays where it was (a #line directive
names the original file), so the compiler's messages and the emulator's reports point at the
.cu file's own lines. A construct it does not recognise is left alone, and cuda_language.h makes a
leftover __shared__ a compile error, never a silent thread-local.
"""
import re
import sys

SHARED = re.compile(
    r"(?P<extern>\bextern\s+)?__shared__\s+(?:__align__\((?P<align>\d+)\)\s+)?"
    r"(?P<type>[A-Za-z_][\w:<>,\s]*?)\s+(?P<name>[A-Za-z_]\w*)\s*(?P<dims>(?:\[[^\]]*\]\s*)*);")


def shared_declaration(m):
    kind, name, dims = m.group("type").strip(), m.group("name"), m.group("dims").replace(" ", "")
    align = m.group("align")
    if m.group("extern"):
        return f"{kind}* {name} = reinterpret_cast<{kind}*>(::emu::dynamic_shared());"
    full = f"{kind} {dims}" if dims else kind
    alignment = f"alignof({full})" if not align else f"({align} > alignof({full}) ? {align} : alignof({full}))"
    site = f"emu_shared_{name}"
    ref = f"{kind} (&{name}){dims}" if dims else f"{kind}& {name}"
    ptr = f"{kind} (*){dims}" if dims else f"{kind}*"
    return (f"static constexpr ::emu::SharedVariable {site}{{\"{name}\"}}; "
            f"{ref} = *reinterpret_cast<{ptr}>(::emu::shared_variable({site}, sizeof({full}), {alignment}));")


def kernel_start(text, end):
    """The start of the kernel expression ending at `end` (an identifier, qualified, possibly with
    template arguments): scans back over identifier characters, '::' and balanced <...>."""
    i = end
    while i > 0:
        c = text[i - 1]
        if c.isalnum() or c in "_:":
            i -= 1
        elif c == ">":
            depth = 0
            while i > 0:
                i -= 1
                if text[i] == ">":
                    depth += 1
                elif text[i] == "<":
                    depth -= 1
                    if depth == 0:
                        break
        else:
            break
    return i


def matching(text, open_index, open_char, close_char):
    """Index of the bracket closing the one at open_index, skipping nested pairs."""
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] == open_char:
            depth += 1
        elif text[i] == close_char:
            depth -= 1
            if depth == 0:
                return i
    raise SystemExit(f"translate.py: unbalanced {open_char} at offset {open_index}")


def launches(text):
    out, pos = [], 0
    while True:
        at = text.find("<<<", pos)
        if at < 0:
            out.append(text[pos:])
            return "".join(out)
        start = kernel_start(text, at)
        kernel = text[start:at].strip()
        close = text.find(">>>", at)
        config = text[at + 3:close]
        paren = close + 3
        while text[paren].isspace():
            paren += 1
        if text[paren] != "(":
            raise SystemExit(f"translate.py: a launch of {kernel} without its arguments")
        end = matching(text, paren, "(", ")")
        args = text[paren + 1:end]
        call = (f"::emu::launch(::emu::LaunchConfig({config}), EMU_LAUNCH_SITE(\"{kernel}\"), "
                f"[](auto&... emu_arg) __attribute__((no_instrument_function)) "
                f"{{ {kernel}(emu_arg...); }}")
        call += f", {args})" if args.strip() else ")"
        out.append(text[pos:start])
        out.append(call)
        pos = end + 1


def translate(text):
    return launches(SHARED.sub(shared_declaration, text))


def main():
    if len(sys.argv) != 3:
        raise SystemExit("usage: translate.py SOURCE OUTPUT")
    source, output = sys.argv[1], sys.argv[2]
    with open(source) as f:
        text = f.read()
    with open(output, "w") as f:
        f.write(f'#line 1 "{source}"\n' + translate(text))


if __name__ == "__main__":
    main()
