"""A process that starts ``LastWords`` on a real writer, then ends as ``argv[2]`` says.

``raise``: an exception naming worker:1 unhealthy leaves the program (live findings on:
the line naming worker:1 is announced); ``raise-quiet``: the same with live findings off;
``user-hook``: the same, under an excepthook of the user's installed before; ``exit``: ``sys.exit(3)`` with
the collectors open; ``stop``: the collectors stop first (prints whether the excepthook
is Python's again).
"""

import sys

from tfdiag.collectors import writers
from tfdiag.collectors.last_words import LastWords

ABORT = ("Graph execution error:\n\nCollective ops is aborted by: The following tasks are unhealthy "
         "(stopped sending heartbeats):\n/job:worker/replica:0/task:1\nThe tasks have crashed.")


def user_hook(error_type, error, traceback):
    print(f"user hook saw {error_type.__name__}", file=sys.stderr)


def main(logdir: str, mode: str) -> None:
    if mode == "user-hook":
        sys.excepthook = user_hook
    writer = writers.acquire(logdir, "worker:0")
    words = LastWords(writer, announces=mode != "raise-quiet").start()
    if mode == "stop":
        words.stop()
        writers.release(writer)
        print("restored" if sys.excepthook is sys.__excepthook__ else "not restored")
        return
    if mode == "exit":
        sys.exit(3)
    raise RuntimeError(ABORT) from ConnectionError("socket closed")


if __name__ == "__main__":
    main(*sys.argv[1:3])
