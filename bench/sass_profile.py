#!/usr/bin/env python3
"""Summarises an Nsight Compute source page (SASS with per-instruction execution counts).

Input: the CSV of `ncu -i REPORT --page source --csv --print-source sass` for one kernel launch
(bench/run_device_bench.sh, step `profile`). Prints warp instructions per work item in all, per
opcode, and per window of consecutive SASS instructions (the program's phases appear in order:
item setup, staging, operand build, products, solve, stores), so a change can be traced to the
phase it moved.

    python3 bench/sass_profile.py sass_src.csv --items 16384 [--window 50]

With --disasm (`nvdisasm -c -gi` of the cubin that `cuobjdump -xelf all` extracts from the -lineinfo
build) and --function (the kernel's mangled name: instruction i of its section is row i of the CSV,
checked by opcode), it also attributes instructions and stall samples to source: the share of the
lines --lines LO:HI of --file (a program phase, with everything inlined into it) and the lines
inside it by samples.

    python3 bench/sass_profile.py sass.csv --items 16384 --disasm all.sass --function _ZN3kda4cuda12chunk_kernel... \
        --file phases.cuh --lines 1013:1232
"""
import argparse
import collections
import csv
import re


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--items", type=int, required=True, help="work items of the launch (chunks x value heads)")
    ap.add_argument("--window", type=int, default=50, help="SASS instructions per window")
    ap.add_argument("--disasm", help="nvdisasm -c -gi listing of the same kernel (source attribution)")
    ap.add_argument("--function", default="", help="the kernel's mangled name: its section of --disasm")
    ap.add_argument("--file", default="phases.cuh", help="source file of --lines")
    ap.add_argument("--lines", default="", metavar="LO:HI", help="line range of --file to attribute (inclusive)")
    args = ap.parse_args()

    rows = list(csv.reader(open(args.csv)))
    header = next(r for r in rows if "Instructions Executed" in r)
    col = header.index("Instructions Executed")
    src = header.index("Source")
    stall = header.index("Warp Stall Sampling (All Samples)") if "Warp Stall Sampling (All Samples)" in header else None
    code, samples = [], []
    for r in rows[rows.index(header) + 1:]:
        try:
            code.append((r[src].strip(), int(r[col])))
            samples.append(int(r[stall]) if stall is not None else 0)
        except (ValueError, IndexError):
            continue
    n = args.items
    print(f"warp instructions per item: {sum(c for _, c in code) / n:.0f} ({len(code)} SASS instructions)")

    per_op = collections.Counter()
    for text, count in code:
        per_op[opcode_of(text)] += count
    print("per opcode: " + " ".join(f"{op}:{c / n:.0f}" for op, c in per_op.most_common(24)))
    marks = ("HMMA", "MUFU", "LDGSTS", "LDG", "STG", "LDS", "STS", "BAR")
    total = 0.0
    for start in range(0, len(code), args.window):
        window = code[start:start + args.window]
        here = sum(c for _, c in window) / n
        total += here
        if here >= 20:
            kinds = collections.Counter(opcode_of(t) for t, _ in window if opcode_of(t) in marks)
            print(f"  [{start:5d}, {start + len(window):5d})  {here:7.0f}  cumulative {total:7.0f}  {dict(kinds)}")

    if args.disasm and args.lines:
        attribute(code, samples, args)


def attribute(code, samples, args) -> None:
    """Instructions and stall samples whose inline chain passes through --file's lines LO..HI."""
    lo, hi = (int(x) for x in args.lines.split(":"))
    frame = re.compile(re.escape(args.file) + r'", line (\d+)')
    chains, chain, fresh = [], [], False
    mine_section = not args.function
    for line in open(args.disasm):
        if line.lstrip().startswith(".section"):
            mine_section = not args.function or line.split()[1].split(",")[0] == ".text." + args.function
            continue
        if not mine_section:
            continue
        if line.lstrip().startswith("//##"):  # one frame of the next instructions' inline chain
            if not fresh:
                chain, fresh = [], True
            chain += [int(m.group(1)) for m in frame.finditer(line)]
        elif re.match(r"\s*/\*[0-9a-f]+\*/\s+\S", line):
            fresh = False
            chains.append((opcode_of(line.split("*/", 1)[1].rstrip().rstrip(";")), list(chain)))
    if len(chains) != len(code) or any(op != opcode_of(text) for (op, _), (text, _) in zip(chains, code)):
        raise SystemExit(f"--disasm does not match the CSV ({len(chains)} vs {len(code)} instructions, or opcodes differ)")
    n = args.items
    inside = collections.Counter()
    ins = smp = 0
    for (_, ch), (_, count), sm in zip(chains, code, samples):
        mine = [x for x in ch if lo <= x <= hi]
        if mine:
            ins += count
            smp += sm
            inside[mine[0]] += sm
    all_ins, all_smp = sum(c for _, c in code), max(sum(samples), 1)
    print(f"{args.file}:{lo}-{hi}: {ins / n:.0f} warp instructions per item ({ins / all_ins:.0%} of the kernel's), "
          f"{smp / all_smp:.0%} of the stall samples")
    print("  by line (share of the kernel's samples): " + " ".join(f"{k}:{v / all_smp:.1%}" for k, v in inside.most_common(12)))


def opcode_of(text: str) -> str:
    words = text.split()
    word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
    return word.split(".")[0]


if __name__ == "__main__":
    main()
