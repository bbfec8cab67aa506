"""A process that runs a system sampler every 0.5 s and prints its wake-up counts and
throttled time as JSON lines; with a second argument ``spin`` a thread also burns CPU.

Run by ``test_stopped_processes.py`` and ``test_cgroup_throttling.py`` as a child it can ``SIGSTOP``/``SIGCONT`` or hold to a cgroup's
CPU quota. Its thread wakes 50 times a second, not 10, so that a few seconds give enough
wake-ups to tell the shares apart.
"""

import json
import sys
import threading
import time

from tfdiag.collectors import system


class PrintingWriter:
    def append(self, kind, **fields):
        if kind == "system":
            print(json.dumps({k: fields[k] for k in ("wakes", "late_wakes", "late_ms", "throttled_ms")}), flush=True)


def spin():
    while True:
        sum(range(1000))


if __name__ == "__main__":
    if sys.argv[2:] == ["spin"]:
        threading.Thread(target=spin, daemon=True).start()
    sampler = system.SystemSampler(PrintingWriter(), "worker:0", interval_s=0.5, gpus=False, cluster={},
                                   wake_s=0.02).start()
    time.sleep(float(sys.argv[1]))
    sampler.stop()
