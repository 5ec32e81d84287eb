#!/usr/bin/env python3
"""Summarises an Nsight Compute source page (SASS with per-instruction execution counts).

Input: the CSV of `ncu -i REPORT --page source --csv --print-source sass` for one kernel launch
(bench/run_device_bench.sh, step `profile`). Prints warp instructions per work item in all, per
opcode, and per window of consecutive SASS instructions (the program's phases appear in order:
item setup, staging, operand build, products, solve, stores), so a change can be traced to the
phase it moved.

    python3 bench/sass_profile.py sass_src.csv --items 16384 [--window 50]
"""
import argparse
import collections
import csv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv")
    ap.add_argument("--items", type=int, required=True, help="work items of the launch (chunks x value heads)")
    ap.add_argument("--window", type=int, default=50, help="SASS instructions per window")
    args = ap.parse_args()

    rows = list(csv.reader(open(args.csv)))
    header = next(r for r in rows if "Instructions Executed" in r)
    col = header.index("Instructions Executed")
    src = header.index("Source")
    code = []
    for r in rows[rows.index(header) + 1:]:
        try:
            code.append((r[src].strip(), int(r[col])))
        except (ValueError, IndexError):
            continue
    n = args.items
    print(f"warp instructions per item: {sum(c for _, c in code) / n:.0f} ({len(code)} SASS instructions)")

    def opcode(text: str) -> str:
        words = text.split()
        word = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        return word.split(".")[0]

    per_op = collections.Counter()
    for text, count in code:
        per_op[opcode(text)] += count
    print("per opcode: " + " ".join(f"{op}:{c / n:.0f}" for op, c in per_op.most_common(24)))
    marks = ("HMMA", "MUFU", "LDGSTS", "LDG", "STG", "LDS", "STS", "BAR")
    total = 0.0
    for start in range(0, len(code), args.window):
        window = code[start:start + args.window]
        here = sum(c for _, c in window) / n
        total += here
        if here >= 20:
            kinds = collections.Counter(opcode(t) for t, _ in window if opcode(t) in marks)
            print(f"  [{start:5d}, {start + len(window):5d})  {here:7.0f}  cumulative {total:7.0f}  {dict(kinds)}")


if __name__ == "__main__":
    main()
