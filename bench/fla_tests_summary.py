"""Summary of FLA's KDA tests run case by case by bench/device_python.sh (step fla-tests).

    python3 bench/fla_tests_summary.py <log folder>

Reads fla_<on>_<n>.log (on: 1 with kda as FLA's backend, 0 the control); prints, per switch and
test function, how many cases passed, failed, were skipped, cut by FLA_TIMEOUT or not started,
the cases that did not pass, and kda's calls and the verifier's declines (from fla_tests_plugin).
"""

from __future__ import annotations

import collections
import pathlib
import re
import sys

OUTCOMES = ("passed", "failed", "error", "skipped", "cut", "not started")


def outcome(text: str) -> str:
    if "outcome: not started" in text:
        return "not started"
    last = [line for line in text.splitlines() if re.search(r"\d+ (passed|failed|errors?|skipped)", line)]
    if not last:
        return "cut"  # no pytest summary line: killed by FLA_TIMEOUT, or the interpreter died
    words = last[-1]
    for key, pattern in (("failed", r"\d+ failed"), ("error", r"\d+ errors?"), ("passed", r"\d+ passed"),
                         ("skipped", r"\d+ skipped")):
        if re.search(pattern, words):
            return key
    return "cut"


def main(folder: str) -> None:
    root = pathlib.Path(folder)
    for on in ("1", "0"):
        logs = sorted(root.glob(f"fla_{on}_*.log"), key=lambda p: int(p.stem.split("_")[-1]))
        if not logs:
            continue
        print(f"-- FLA_KDA={on} ({'kda on' if on == '1' else 'the control: FLA alone'}): {len(logs)} cases")
        counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        bad, calls, declines = [], 0, collections.Counter()
        for log in logs:
            text = log.read_text(errors="replace")
            case = text.splitlines()[0].removeprefix("case: ") if text else log.name
            o = outcome(text)
            counts[case.split("[")[0]][o] += 1
            if o not in ("passed", "skipped"):
                bad.append(f"{o}: {case} ({log.name})")
            for m in re.finditer(r"^kda\.fla: (\d+) calls", text, re.M):
                calls += int(m.group(1))
            for m in re.finditer(r"^kda\.fla: declined (\d+) x: (.*)$", text, re.M):
                declines[m.group(2)] += int(m.group(1))
        total = collections.Counter()
        for fn, c in counts.items():
            total.update(c)
            print(f"{fn}: " + ", ".join(f"{c[o]} {o}" for o in OUTCOMES if c[o]))
        print("all: " + ", ".join(f"{total[o]} {o}" for o in OUTCOMES if total[o]))
        print(f"kda.fla: {calls} calls of chunk_kda_fwd_intra served by kda")
        for reason, n in declines.most_common():
            print(f"kda.fla: declined {n} x: {reason}")
        for line in bad:
            print(f"  {line}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
