"""When a reading that has a usual level turns slower than usual: the onset of a slow spell.

:class:`Onsets` keeps, per key (a link), the usual level of its readings (the lower
quartile of its last ``USUAL_READINGS`` readings in band: what the path costs, as the
slow-link detector judges a link by its fastest round trip; load only adds to a reading.
A mean, or the median, follows a busy host up: ps_tutorial's liveness checks answered in
8-10 ms while the job started, that median took the 12 ms answers behind a 10 ms delay in
band, and its first three delays of a run at 91e032d were never called) and says when a
spell of readings ``rise`` times that level (and ``floor`` above it) begins: at the
``after``-th such reading in a row, not on every reading while the spell lasts, and where
``again_every`` is set, again every ``again_every`` readings while it lasts (a spell that
began on a spike of jitter just before the real onset is then looked at again once the
onset came);
and when a spell that began ends (the first reading in band again). After ``settle``
slow readings in a row the slower level is the usual one (the job changed). A key is
judged only once ``warm_up`` readings in band made its usual level.

Example:
    >>> onsets = Onsets(rise=1.5, after=2, warm_up=3)
    >>> [onsets.change("link", value) for value in (10, 11, 10, 30, 30, 30, 10, 30)]
    [None, None, None, None, 'slow', None, 'ended', None]
    >>> onsets = Onsets(rise=1.5, after=2, again_every=2, warm_up=3)
    >>> [onsets.change("link", value) for value in (10, 11, 10, 30, 30, 30, 30, 30)]
    [None, None, None, None, 'slow', None, 'slow', None]
"""

from __future__ import annotations

from collections import deque

# Readings in band whose lower quartile is a key's usual level.
USUAL_READINGS = 10


class Onsets:
    """Per key, the usual level of its readings and the onsets of slower spells."""

    def __init__(self, rise: float, floor: float = 0.0, after: int = 1, again_every: int = 0, warm_up: int = 5,
                 settle: int = 10):
        self.rise = rise
        self.floor = floor
        self.after = after
        self.again_every = again_every
        self.warm_up = warm_up
        self.settle = settle
        self._in_band: dict = {}  # key -> its last USUAL_READINGS readings in band
        self._slow: dict = {}  # key -> slow readings in a row, while slow
        self._began: set = set()  # keys in a slow spell that began (``change`` said so)

    def slow_in_a_row(self, key) -> int:
        """How many of ``key``'s latest readings in a row were slow (0 when its last was not)."""
        return self._slow.get(key, 0)

    def is_slow(self, key, value: float) -> bool:
        """Whether ``value`` is slow for ``key`` (False while ``key`` has no usual level yet);
        folds nothing."""
        in_band = self._in_band.get(key, ())
        if len(in_band) < self.warm_up:
            return False
        usual = sorted(in_band)[len(in_band) // 4]
        return value >= self.rise * usual and value - usual >= self.floor

    def change(self, key, value: float) -> str | None:
        """Folds one reading of ``key``: ``"slow"`` where a slow spell begins (or, with
        ``again_every``, calls again while it lasts), ``"ended"`` at the first reading in
        band after a spell that began, else None."""
        in_band = self._in_band.setdefault(key, deque(maxlen=USUAL_READINGS))
        if self.is_slow(key, value):
            in_a_row = self._slow[key] = self._slow.get(key, 0) + 1
            if in_a_row >= self.settle:  # the level changed: this is its usual now
                in_band.clear()
                in_band.extend([value] * self.warm_up)
                del self._slow[key]
                self._began.discard(key)
                return None
            if in_a_row == self.after or (
                    self.again_every and in_a_row > self.after and (in_a_row - self.after) % self.again_every == 0):
                self._began.add(key)
                return "slow"
            return None
        self._slow.pop(key, None)
        in_band.append(value)
        if key in self._began:
            self._began.discard(key)
            return "ended"
        return None
