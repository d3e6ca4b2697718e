"""The score per module of the last `make mutants` (docs/testing.md#mutation-testing), read
from the results mutmut keeps beside each mutated copy (mutants/<module>.meta), and the
mutants that survived: the ones a new test must kill or docs/testing.md must explain.

    python mutation/scores.py [MODULE ...]   # e.g. pricewatch/slots.py; default: all
"""

import json
import sys
import tomllib
from collections import Counter
from pathlib import Path

# mutmut's exit codes (mutmut/stats.py): a kill is a test that failed (1), pytest's internal
# error (3), a timeout (the mutant hung a test) or a type-check rejection (37).
DETECTED = {1, 3, 36, 37, -24, 24, 152, 255}
SURVIVED = {0}
NO_TESTS = {5, 33}
# Modules whose promise is a few of their functions: the selection's tests are chosen for
# those, and only their mutants are scored; the rest is counted apart ("outside"), as is any
# mutant no test reaches. activities/store.py is the claim and commit (and the lease); its
# read side and the target mirror are the CLI's and the web's, tested through them.
SCOPE = {
    "activities/store.py": {
        "claim", "commit", "release", "extend_lease", "lease_left", "record_failed",
        "advance_past_final", "Claim.without_previous", "_json_list", "_result",
    },
}  # fmt: skip


def function(module: str, key: str) -> str:
    """`claim` of `activities.store.x_claim__mutmut_3`, `Claim.without_previous` of
    `activities.store.xǁClaimǁwithout_previous__mutmut_1`."""
    name = key.removeprefix(module.removesuffix(".py").replace("/", ".") + ".")
    name = name.split("__mutmut_")[0].removeprefix("x_").removeprefix("x")
    return ".".join(part for part in name.split("ǁ") if part)


def modules() -> list[str]:
    config = tomllib.loads(Path("pyproject.toml").read_text())
    return list(config["tool"]["mutmut"]["only_mutate"])


def main(wanted: list[str]) -> None:
    print(f"{'module':32} {'mutants':>7} {'killed':>6} {'survived':>8} {'no test':>7} "
          f"{'unrun':>5} {'score':>6}")  # fmt: skip
    survivors = []
    for module in wanted or modules():
        meta = Path("mutants") / f"{module}.meta"
        if not meta.exists():
            print(f"{module:32} not run")
            continue
        codes = json.loads(meta.read_text())["exit_code_by_key"]
        if module in SCOPE:
            inside = {k: v for k, v in codes.items() if function(module, k) in SCOPE[module]}
            print(f"{module:32} {len(codes) - len(inside)} mutants outside {sorted(SCOPE[module])}")
            codes = inside
        count = Counter(
            "killed" if code in DETECTED else
            "survived" if code in SURVIVED else
            "no test" if code in NO_TESTS else
            "unrun" if code is None else "other"
            for code in codes.values()
        )  # fmt: skip
        ran = len(codes) - count["unrun"]
        score = f"{100 * count['killed'] / ran:.1f}%" if ran else "-"
        print(f"{module:32} {len(codes):7} {count['killed']:6} {count['survived']:8} "
              f"{count['no test']:7} {count['unrun']:5} {score:>6}")  # fmt: skip
        survivors += [name for name, code in codes.items() if code in SURVIVED | NO_TESTS]
    if survivors:
        print("\nSurvivors (`mutmut show NAME` prints the change):")
        print("\n".join(f"  {name}" for name in sorted(survivors)))


if __name__ == "__main__":
    main(sys.argv[1:])
