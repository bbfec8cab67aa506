"""When a reading that has a usual level turns slower than usual: the onset of a slow spell.

:class:`Onsets` keeps, per key (a worker, a link), the usual level of its readings (a
moving geometric mean of the readings in band) and says when a spell of readings
``rise`` times that level (and ``floor`` above it) begins: at the ``after``-th such
reading in a row, once, not on every reading while the spell lasts. After ``settle``
slow readings in a row the slower level is the usual one (the job changed). A key is
judged only once ``warm_up`` readings in band made its usual level.

Example:
    >>> onsets = Onsets(rise=1.5, after=2, warm_up=3)
    >>> [onsets.began("link", value) for value in (10, 11, 10, 30, 30, 30, 10, 30)]
    [False, False, False, False, True, False, False, False]
"""

from __future__ import annotations


class Onsets:
    """Per key, the usual level of its readings and the onsets of slower spells."""

    def __init__(self, rise: float, floor: float = 0.0, after: int = 1, warm_up: int = 5, settle: int = 10):
        self.rise = rise
        self.floor = floor
        self.after = after
        self.warm_up = warm_up
        self.settle = settle
        self._usual: dict = {}
        self._in_band: dict = {}  # key -> readings in band so far
        self._slow: dict = {}  # key -> slow readings in a row, while slow

    def slow_in_a_row(self, key) -> int:
        """How many of ``key``'s latest readings in a row were slow (0 when its last was not)."""
        return self._slow.get(key, 0)

    def began(self, key, value: float) -> bool:
        """Folds one reading of ``key``; whether it begins a slow spell."""
        value = max(float(value), 1e-12)
        usual = self._usual.get(key)
        if usual is not None and self._in_band.get(key, 0) >= self.warm_up \
                and value >= self.rise * usual and value - usual >= self.floor:
            in_a_row = self._slow[key] = self._slow.get(key, 0) + 1
            if in_a_row >= self.settle:  # the level changed: this is its usual now
                self._usual[key] = value
                del self._slow[key]
            return in_a_row == self.after
        self._slow.pop(key, None)
        self._usual[key] = value if usual is None else usual ** 0.75 * value ** 0.25
        self._in_band[key] = self._in_band.get(key, 0) + 1
        return False
