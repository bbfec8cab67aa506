from tfdiag.sample_jobs.log_follower import LogFollower


def test_only_complete_announced_lines_are_handed_over_once(tmp_path):
    log = tmp_path / "chief-0.log"
    follower = LogFollower(log, "tfdiag: ")
    assert follower.new_lines() == []  # no log yet
    log.write_bytes(b"INFO step 10\ntfdiag: worker:1 straggler since step 2,000: slow\ntfdiag: worker:1 str")
    assert follower.new_lines() == ["tfdiag: worker:1 straggler since step 2,000: slow"]
    assert follower.new_lines() == []
    with open(log, "ab") as out:
        out.write(b"aggler cleared\r\nWARNING:tfdiag:tfdiag: not an announcement\n\xff tfdiag: \n")
    assert follower.new_lines() == ["tfdiag: worker:1 straggler cleared"]
