"""A process whose training thread steps, then blocks in ``stuck_in_a_collective``;
``StackDumps`` watches it (1 s to stuck). Prints "blocked" once it blocks."""

import sys
import threading
import time

from tfdiag.collectors.heartbeat import Progress
from tfdiag.collectors.stacks import StackDumps


def stuck_in_a_collective(release: threading.Event) -> None:
    release.wait(60)


def main(logdir: str) -> None:
    progress = Progress()
    dumps = StackDumps(logdir, "worker:0", progress, stuck_after_s=1.0, check_every_s=0.2).start()
    for _ in range(3):
        progress.count += 1
        time.sleep(0.05)
    print("blocked", flush=True)
    stuck_in_a_collective(threading.Event())
    dumps.stop()


if __name__ == "__main__":
    main(sys.argv[1])
