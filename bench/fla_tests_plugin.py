"""pytest plugin: FLA's own tests with kda as FLA's backend, and kda's count of calls and declines.

    PYTHONPATH=bench python3 -m pytest -p fla_tests_plugin <FLA checkout>/tests/ops/test_kda.py -k chunk
    FLA_KDA=0 PYTHONPATH=bench python3 -m pytest -p fla_tests_plugin ...      # the control: FLA alone

The summary's last lines read "kda.fla: N calls of chunk_kda_fwd_intra served by kda" and the
verifier's declines by reason.
"""

import kda.fla


def pytest_terminal_summary(terminalreporter):
    s = kda.fla.stats()
    terminalreporter.write_line(f"kda.fla: {s['calls']} calls of chunk_kda_fwd_intra served by kda")
    for reason, n in sorted(s["declined"].items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"kda.fla: declined {n} x: {reason}")
