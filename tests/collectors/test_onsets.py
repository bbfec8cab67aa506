"""The onset of a slow spell: when a key's readings turn slower than its usual level."""

from tfdiag.collectors.onsets import Onsets

USUAL = (10, 11, 10, 9, 10)


def _onsets_of(onsets: Onsets, readings) -> list[int]:
    """The positions (1-based, counted from the first reading after the warm-up) that began a spell."""
    for value in USUAL:
        assert not onsets.began("link", value)
    return [at for at, value in enumerate(readings, 1) if onsets.began("link", value)]


def test_a_spell_is_an_onset_once_at_its_after_th_slow_reading():
    assert _onsets_of(Onsets(rise=3.0, floor=2.0, after=2), [30] * 9) == [2]


def test_a_spell_that_lasts_is_an_onset_again_every_again_every_readings_until_it_settles():
    """Slow readings 2, 5 and 8 call again; at the 10th the slow level is the usual one, and
    readings at it are no spell."""
    onsets = Onsets(rise=3.0, floor=2.0, after=2, again_every=3, settle=10)
    assert _onsets_of(onsets, [30] * 14) == [2, 5, 8]


def test_a_reading_in_band_ends_the_spell_and_the_next_counts_afresh():
    onsets = Onsets(rise=3.0, floor=2.0, after=2, again_every=3)
    assert _onsets_of(onsets, [30, 30, 30, 10, 30, 30, 30, 30, 30]) == [2, 6, 9]


def test_readings_under_the_floor_are_no_spell_however_many_times_the_usual():
    onsets = Onsets(rise=3.0, floor=0.002, after=2, again_every=3)
    for value in (0.0001, 0.0001, 0.0001, 0.0001, 0.0001):
        onsets.began("link", value)
    assert not any(onsets.began("link", 0.001) for _ in range(9))  # 10x the usual, 0.9 ms above it
