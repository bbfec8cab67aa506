"""The onset of a slow spell: when a key's readings turn slower than its usual level, and back."""

from tfdiag.collectors.onsets import Onsets

USUAL = (10, 11, 10, 9, 10)


def _changes(onsets: Onsets, readings) -> list[tuple[int, str]]:
    """(position, change) of the readings that changed something, counted from 1 after the warm-up."""
    for value in USUAL:
        assert onsets.change("link", value) is None
    return [(at, change) for at, value in enumerate(readings, 1) if (change := onsets.change("link", value))]


def test_a_spell_is_an_onset_once_at_its_after_th_slow_reading_and_ends_back_in_band():
    assert _changes(Onsets(rise=3.0, floor=2.0, after=2), [30] * 9 + [10, 10]) == [(2, "slow"), (10, "ended")]


def test_a_spell_that_lasts_calls_again_every_again_every_readings_until_it_settles():
    """Slow readings 2, 5 and 8 call; at the 10th the slow level is the usual one: readings
    at it are no spell, and the return to the old level is no end of one."""
    onsets = Onsets(rise=3.0, floor=2.0, after=2, again_every=3, settle=10)
    assert _changes(onsets, [30] * 14 + [10]) == [(2, "slow"), (5, "slow"), (8, "slow")]


def test_a_reading_in_band_ends_the_spell_and_the_next_counts_afresh():
    onsets = Onsets(rise=3.0, floor=2.0, after=2, again_every=3)
    assert _changes(onsets, [30, 30, 30, 10, 30, 30, 30, 30, 30]) == [(2, "slow"), (4, "ended"), (6, "slow"),
                                                                     (9, "slow")]


def test_a_slow_reading_that_began_no_spell_ends_none():
    assert _changes(Onsets(rise=3.0, floor=2.0, after=2), [30, 10, 30, 10]) == []


def test_readings_under_the_floor_are_no_spell_however_many_times_the_usual():
    onsets = Onsets(rise=3.0, floor=0.002, after=2, again_every=3)
    for value in (0.0001, 0.0001, 0.0001, 0.0001, 0.0001):
        onsets.change("link", value)
    assert not any(onsets.change("link", 0.001) for _ in range(9))  # 10x the usual, 0.9 ms above it


def test_a_usual_learned_while_the_host_was_busy_comes_down_with_its_first_fast_readings():
    """Answers of 9-12 ms while the job starts, three of 1 ms once it settled, then a 10 ms
    delay: the usual is what the path costs (its lower quartile), so the delay is a spell."""
    onsets = Onsets(rise=3.0, floor=2.0, after=2, warm_up=3)
    busy, settled, delayed = [9, 10, 9, 12, 12], [1, 1, 1], [12, 12]
    assert [onsets.change("link", value) for value in busy + settled + delayed][-2:] == [None, "slow"]
