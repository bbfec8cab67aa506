"""Small fakes shared by the collector unit tests."""

from __future__ import annotations

from collections import defaultdict


class FakeWriter:
    """Collects appended records per kind, like ``TaskWriter`` but in memory."""

    def __init__(self, task: str = "chief:0"):
        self.task = task
        self.records = defaultdict(list)

    def append(self, kind, /, **values):
        self.records[kind].append(values)

    def flush(self):
        pass

    def close(self):
        pass
