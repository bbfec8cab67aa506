"""The labelled corpus: real trial runs kept in the repository, re-analysed by the tests.

``save`` copies a judged trial's fault run (its ``plugins/tfdiag`` files: the task files and
the manifest, not the empty stack dumps) to ``benchmarks/corpus/seed-N/`` with a
``label.json``: the trial as drawn (job, fault, planted task, strength, hogs), the planted
finding kind, the fix measured where it ran (description, predicted and measured speed-up)
and the verdict when recorded (recalled, false alarms). ``tests/benchmarks/test_corpus.py``
analyses every run again and holds recall and precision to the recorded verdicts.

    .venv/bin/python -m benchmarks.trial_corpus --results benchmarks/results/trials.jsonl 1003 1011 ...
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from benchmarks.trial_judge import diagnosis, judge
from benchmarks.trial_run import EXPECTED_KIND

CORPUS = Path(__file__).resolve().parent / "corpus"


def label_of(row: dict) -> dict:
    """What a corpus run is labelled with."""
    trial, verdict = row["trial"], judge(row["trial"], row["result"])
    return {"trial": trial, "planted_kind": EXPECTED_KIND.get(trial["fault"]), "planted_task": trial["task"] or None,
            "fix": None if not trial["fix"] else {"description": row["result"].get("fix_description"),
                                                  "predicted": verdict["predicted"], "measured": verdict["measured"]},
            "recorded": {"recalled": verdict["recalled"], "false_alarms": verdict["false_alarms"]},
            "load1": row["result"]["load1"], "cores": row["result"].get("cores", 2)}


def save(row: dict, corpus: Path = CORPUS) -> Path:
    """Copies the trial's fault run into the corpus; its directory."""
    source = Path(row["result"]["runs"]["fault"]["logdir"]) / "plugins" / "tfdiag"
    target = corpus / f"seed-{row['trial']['seed']}"
    shutil.rmtree(target, ignore_errors=True)
    files = target / "plugins" / "tfdiag"
    files.mkdir(parents=True)
    for path in source.iterdir():
        if path.is_file() and path.stat().st_size > 0:
            shutil.copy2(path, files / path.name)
    (target / "label.json").write_text(json.dumps(label_of(row), indent=1) + "\n")
    return target


def verdict_of(label: dict, findings: list[dict]) -> dict:
    """Recall and false alarms of a re-analysis (``findings``: the report's, as dicts). A run
    labelled with no planted kind though a fault was planted (its fix measured no gain: the
    label's ``note``) must not report the fault's kind at warning level either."""
    _, hit, false_alarms = diagnosis(label["trial"], findings, max(label["load1"]) > label["cores"])
    if label["planted_kind"] is None and hit is not None:
        false_alarms.append(f"{hit['kind']} {','.join(hit['tasks'])}")
    return {"recalled": None if label["planted_kind"] is None else hit is not None, "false_alarms": false_alarms}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("seeds", nargs="+", type=int)
    parser.add_argument("--results", type=Path, default=Path("benchmarks/results/trials.jsonl"))
    args = parser.parse_args(argv)
    rows = {json.loads(line)["trial"]["seed"]: json.loads(line) for line in args.results.read_text().splitlines()}
    for seed in args.seeds:
        if seed not in rows or "error" in rows[seed]["result"]:
            print(f"seed {seed}: no judged trial in {args.results}", file=sys.stderr)
            return 2
        print(save(rows[seed]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
