"""Turns on the machine (tests/turns.py), checked on a real two-worker pytest-xdist run."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TIMED_TESTS = '''
import json, os, time
import pytest

def _timed(name):
    start = time.monotonic()
    time.sleep(0.4)
    with open(os.environ["TURNS_LOG"], "a") as log:
        log.write(json.dumps({{"name": name, "start": start, "end": time.monotonic()}}) + "\\n")

{tests}
'''


def _test_file(prefix: str, alone: set[int]) -> str:
    tests = "\n".join(f"{'@pytest.mark.alone' + chr(10) if index in alone else ''}"
                      f"def test_{prefix}{index}():\n    _timed('{prefix}{index}{'-alone' if index in alone else ''}')\n"
                      for index in range(4))
    return TIMED_TESTS.format(tests=tests)


def test_alone_tests_run_with_no_other_beside_them_and_the_rest_run_together(tmp_path):
    (tmp_path / "test_a.py").write_text(_test_file("a", alone={1}))
    (tmp_path / "test_b.py").write_text(_test_file("b", alone={2}))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    alone: runs with no other test beside it\n")
    log = tmp_path / "turns.jsonl"
    env = {"PYTHONPATH": str(ROOT), "TURNS_LOG": str(log), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.turns",
                           "-n", "2", "--dist", "loadfile", "--basetemp", str(tmp_path / "basetemp"),
                           "test_a.py", "test_b.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    runs = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(runs) == 8

    def overlap(first, second):
        return first["start"] < second["end"] and second["start"] < first["end"]

    pairs = [(first, second) for index, first in enumerate(runs) for second in runs[index + 1:] if overlap(first, second)]
    assert not [pair for pair in pairs if any(run["name"].endswith("-alone") for run in pair)], pairs
    assert pairs, "no two tests ran at once: the workers took turns they did not need"
