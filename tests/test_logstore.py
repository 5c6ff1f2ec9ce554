"""The logger's on-disk log: crash safety, CRC checks, recovery, GC."""
import glob
import os

import pytest
from hypothesis import given, settings, strategies as st

from rpbcast.core.logstore import LogError, LogStore, crc32c, crc32c_table


def segs(d):
    return sorted(glob.glob(os.path.join(d, "seg-*.rplog")))


def test_crc32c_known_value_and_hardware_matches_table():
    assert crc32c(b"123456789") == 0xE3069283
    for n in (0, 1, 7, 8, 9, 63, 64, 1000):
        data = os.urandom(n)
        assert crc32c(data) == crc32c_table(data)


def test_append_read_and_duplicates(tmp_path):
    with LogStore(tmp_path / "log") as log:
        assert log.append(1, 2, 0, b"zero")
        assert log.append(1, 2, 1, b"one", label=77)
        assert not log.append(1, 2, 1, b"again")        # already logged
        assert log.read(1, 2, 0) == (b"zero", None)
        assert log.read(1, 2, 1) == (b"one", 77)
        assert log.read(1, 2, 2) is None
        assert log.read(9, 9, 0) is None
        assert log.has(1, 2, 1) and not log.has(1, 3, 1)


def test_reopen_recovers_everything(tmp_path):
    d = tmp_path / "log"
    with LogStore(d) as log:
        for s in range(3):
            for q in range(100):
                log.append(s, 1, q, b"m%d.%d" % (s, q))
        log.sync()
    with LogStore(d) as log:
        assert sorted(log.streams()) == [(s, 1, 100, 0, 99) for s in range(3)]
        assert log.stats()["recovered_records"] == 300
        assert all(log.read(s, 1, q)[0] == b"m%d.%d" % (s, q) for s in range(3) for q in range(100))
        assert list(log.seqs(1, 1)) == list(range(100))


def test_torn_tail_is_cut_off(tmp_path):
    """A crash in the middle of a write leaves half a record at the end of
    the newest segment: recovery drops it and keeps everything before."""
    d = tmp_path / "log"
    with LogStore(d) as log:
        for q in range(10):
            log.append(1, 1, q, b"x" * 100)
    (path,) = segs(d)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 30)                 # the last record is torn
    with LogStore(d) as log:
        assert [q for q in range(10) if log.has(1, 1, q)] == list(range(9))
        st_ = log.stats()
        assert st_["recovered_truncated_bytes"] == 148 - 30
        # and appending continues cleanly after the cut
        assert log.append(1, 1, 9, b"again")
        log.sync()
    with LogStore(d) as log:
        assert log.read(1, 1, 9) == (b"again", None)


def test_corrupt_record_is_detected(tmp_path):
    d = tmp_path / "log"
    with LogStore(d) as log:
        for q in range(5):
            log.append(1, 1, q, b"payload-%d" % q)
        log.sync()
        (path,) = segs(d)
        # Corrupt a payload byte of record 2 (each record: 48-byte header + 9 bytes).
        with open(path, "r+b") as f:
            f.seek(2 * 57 + 48 + 3)
            f.write(b"#")
        with pytest.raises(LogError):
            log.read(1, 1, 2)                 # CRC mismatch on read
        assert log.read(1, 1, 1) == (b"payload-1", None)
    with LogStore(d) as log:
        # Recovery stops at the bad record of the newest segment.
        assert [q for q in range(5) if log.has(1, 1, q)] == [0, 1]


def test_segments_roll_over_and_gc_deletes_whole_segments(tmp_path):
    d = tmp_path / "log"
    with LogStore(d, segment_bytes=4096) as log:
        for q in range(400):
            log.append(1, 1, q, bytes(52))    # 100-byte records: ~40 per segment
        log.sync()
        n0 = len(segs(d))
        assert n0 >= 9
        dropped = log.gc(1, 1, 200)
        assert dropped == 200
        assert not log.has(1, 1, 199) and log.has(1, 1, 200)
        n1 = len(segs(d))
        assert n1 < n0 and n1 >= n0 // 2
        log.gc(1, 1, 400)
        assert len(segs(d)) == 1             # the newest segment is kept
    with LogStore(d, segment_bytes=4096) as log:
        assert all(not log.has(1, 1, q) for q in range(0, 360))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.integers(0, 300), st.binary(max_size=40)),
    st.tuples(st.just("reopen"), st.just(0), st.just(0), st.just(b"")),
    st.tuples(st.just("gc"), st.integers(0, 2), st.integers(0, 300), st.just(b"")),
), max_size=60))
def test_log_matches_a_dict_model_across_reopens(tmp_path_factory, ops):
    d = tmp_path_factory.mktemp("log")
    model = {}
    ghosts = {}          # collected from the index; may come back after a reopen
    gc_below = {}
    log = LogStore(d, segment_bytes=2048)
    try:
        for op, s, q, data in ops:
            if op == "append":
                # below the GC frontier a record counts as already logged
                fresh = (s, q) not in model and q >= gc_below.get(s, 0)
                got = log.append(s, 1, q, data)
                assert got == fresh
                if fresh:
                    model[(s, q)] = data
                    ghosts.pop((s, q), None)
            elif op == "gc":
                if q > gc_below.get(s, 0):
                    gc_below[s] = q
                    log.gc(s, 1, q)
                    for k in [k for k in model if k[0] == s and k[1] < q]:
                        ghosts[k] = model.pop(k)
            else:
                log.sync()
                log.close()
                log = LogStore(d, segment_bytes=2048)
                # GC frontiers are not persisted: a collected record whose
                # segment survived is indexed again -- with its exact bytes.
                gc_below.clear()
                for k, v in list(ghosts.items()):
                    r = log.read(k[0], 1, k[1])
                    if r is not None:
                        assert r == (v, None)
                        model[k] = ghosts.pop(k)
            for (ss, qq), v in model.items():
                assert log.read(ss, 1, qq) == (v, None)
            for (ss, qq) in ghosts:
                if (ss, qq) not in model:
                    assert log.read(ss, 1, qq) is None
    finally:
        log.close()
