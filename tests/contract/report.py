"""Run the contract suite and print the tables of docs/contract.md: counts per class, and the skip reasons.

    RUN_SLOW=1 python tests/contract/report.py [pytest arguments, e.g. -n 2]

Counts are per test (pytest's subtests, upstream's loop over model classes, are not counted apart): passed,
skipped, xfailed (the known bugs), failed. Skips are split into the suite's named deviations (contract_common.
BASE_MODEL_SKIPS and the `skips` tables of the test modules) and upstream's own skips (a GPU, flash attention, a
feature the model does not declare), which upstream's tests decide themselves.
"""

import collections
import re
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
OUTCOMES = ("passed", "skipped", "xfailed", "failed")


class Collect:
    def __init__(self):
        self.outcome = {}  # nodeid -> outcome
        self.reason = {}  # nodeid -> skip or xfail reason

    def pytest_runtest_logreport(self, report):
        if hasattr(report, "context"):  # a subtest's report: its test is counted once
            return
        if report.when == "call" or (report.when == "setup" and not report.passed) or report.failed:
            if hasattr(report, "wasxfail"):
                outcome, reason = ("xfailed", report.wasxfail) if report.skipped else ("failed", report.wasxfail)
            elif report.skipped:
                outcome, reason = "skipped", report.longrepr[2] if isinstance(report.longrepr, tuple) else ""
            else:
                outcome, reason = report.outcome, ""
            if self.outcome.get(report.nodeid) != "failed":  # a teardown error keeps the failure
                self.outcome[report.nodeid], self.reason[report.nodeid] = outcome, reason.removeprefix("Skipped: ")


def owner(nodeid: str) -> str:
    """The model class a test checks: its unittest class's, or the case of a generation test (the same name), e.g.
    "NeuTRENOGPTForCausalLM" or "ValuePathLlamaForCausalLM (value_residual)"; the suite's own checks by module."""
    path, *rest = nodeid.split("::")
    if len(rest) == 2:
        name = rest[0].removesuffix("_Test").removesuffix("Test")
    elif case := re.search(r"\[(.+)\]$", nodeid):
        name = case.group(1).replace("-", "_", 1)
    else:
        return f"{Path(path).stem} (suite checks)"
    base, _, method = name.partition("_")
    return f"{base} ({method})" if method else base


def main(argv):
    collect = Collect()
    start = time.monotonic()
    code = pytest.main([str(HERE), "-q", "-p", "no:cacheprovider", *argv], plugins=[collect])
    seconds = time.monotonic() - start
    counts = collections.defaultdict(collections.Counter)
    for nodeid, outcome in collect.outcome.items():
        counts[owner(nodeid)][outcome] += 1
    print(f"\n{len(collect.outcome)} tests in {seconds:.0f} s (pytest exit code {int(code)})\n")
    print("| class | passed | skipped | xfailed | failed |\n| --- | ---: | ---: | ---: | ---: |")
    total = collections.Counter()
    for name in sorted(counts):
        total.update(counts[name])
        print(f"| {name} | " + " | ".join(str(counts[name][o]) for o in OUTCOMES) + " |")
    print("| **total** | " + " | ".join(f"**{total[o]}**" for o in OUTCOMES) + " |")
    reasons = collections.Counter(
        collect.reason[nodeid] for nodeid, outcome in collect.outcome.items() if outcome == "skipped"
    )
    print("\n| skips | reason |\n| ---: | --- |")
    for reason, count in reasons.most_common():
        print(f"| {count} | {reason} |")
    return int(code)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
