"""The logger's on-disk log: crash safety, CRC checks, recovery, GC.

Records are runs of consecutive messages of one stream (one CRC each); a
flush ends the run being written, so each ``flush()`` below closes one
record.  The damage tests check the log's promise: after any damage, every
id that was appended is either read back intact or reported as damaged --
never silently gone -- and only an incomplete last record of the newest
segment (a torn write) is ever cut.
"""
import glob
import logging
import os
import struct
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from rpbcast.core.logstore import LogError, LogStore, crc32c, crc32c_table

SEG_HDR = 16
HDR = 40


def segs(d):
    return sorted(glob.glob(os.path.join(d, "seg-*.rplog")))


def payload(s, q):
    return b"m%d.%d" % (s, q) + b"." * (q % 23)


def records(path):
    """(offset, reclen, seq, count) of the records of a clean segment file."""
    return [r[:4] for r in records_with_sender(path)]


def records_with_sender(path):
    data = open(path, "rb").read()
    pos, out = SEG_HDR, []
    while pos + HDR <= len(data):
        reclen, count, sender = struct.unpack_from("<III", data, pos + 8)
        if reclen == 0:
            break               # a log still open: direct writes pad its last block with zeros
        seq = struct.unpack_from("<Q", data, pos + 24)[0]
        out.append((pos, reclen, seq, count, sender))
        pos += reclen
    return out


def test_crc32c_known_value_and_hardware_matches_table():
    assert crc32c(b"123456789") == 0xE3069283
    for n in (0, 1, 7, 8, 9, 63, 64, 767, 768, 769, 1000, 1536, 2304, 5000, 16384 + 13):
        data = os.urandom(n)
        assert crc32c(data) == crc32c_table(data), n
        assert crc32c(data, 0x1234) == crc32c_table(data, 0x1234), n


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
        log.flush()
        assert log.read(1, 2, 1) == (b"one", 77)          # now from the file


def test_runs_are_one_record_per_stretch_of_consecutive_ids(tmp_path):
    d = tmp_path / "log"
    with LogStore(d) as log:
        for q in range(100):
            log.append(1, 1, q, payload(1, q))
        log.append(1, 1, 200, b"x")                     # a jump: a new run
        for q in range(100, 110):
            log.append(1, 1, q, payload(1, q))          # a fill, after the jump
        log.flush()
        assert [(seq, count) for _, _, seq, count in records(segs(d)[0])] == [(0, 100), (200, 1), (100, 10)]
        assert log.intervals(1, 1).tolist() == [[0, 109], [200, 200]]
        assert [q for q, _, _ in log.read_range(1, 1, 95, 205)] == list(range(95, 110)) + [200]
        assert all(p == payload(1, q) for q, p, _ in log.read_range(1, 1, 0, 109))


@settings(max_examples=40, deadline=None)
@given(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=300),
       order=st.randoms(use_true_random=False), flush_at=st.integers(0, 300))
def test_reads_in_any_order_within_a_run_return_each_entry(tmp_path_factory, sizes, order, flush_at):
    # Reading id by id resumes the walk through a run where the last read
    # stopped (serving a run is linear, not quadratic): forwards, backwards,
    # repeated or random, each id still reads back its own entry, from the
    # write buffer or the file.
    d = tmp_path_factory.mktemp("walk") / "log"
    with LogStore(d) as log:
        want = {}
        for q, n in enumerate(sizes):
            want[q] = (bytes([q % 251]) * n, q if q % 3 == 0 else None)
            log.append(1, 1, q, want[q][0], label=want[q][1])
            if q == flush_at:
                log.flush()
        ids = list(want) + list(reversed(want)) + [q for q in want for _ in range(2)]
        order.shuffle(ids)

        def check():
            for k, q in enumerate(ids):
                assert log.read(1, 1, q) == want[q]
                if k % 50 == 0:       # a cursor (how catch-up streams) between single reads
                    lo = order.randrange(len(want))
                    hi = order.randrange(lo, len(want))
                    assert log.read_range(1, 1, lo, hi) == [(x, *want[x]) for x in range(lo, hi + 1)]
        check()
        log.flush()
        check()


def test_reopen_recovers_everything(tmp_path):
    d = tmp_path / "log"
    with LogStore(d) as log:
        for s in range(3):
            for q in range(100):
                log.append(s, 1, q, payload(s, q), label=q if q % 3 == 0 else None)
        log.sync()
    with LogStore(d) as log:
        assert sorted(log.streams()) == [(s, 1, 100, 0, 99) for s in range(3)]
        assert log.stats()["recovered_records"] == 300
        assert all(log.read(s, 1, q) == (payload(s, q), q if q % 3 == 0 else None)
                   for s in range(3) for q in range(100))
        assert list(log.seqs(1, 1)) == list(range(100))
        assert log.recovery()["damaged_records"] == 0


def test_torn_tail_is_cut_off(tmp_path):
    """A crash in the middle of a write leaves part of a record at the end
    of the newest segment: recovery drops that record, keeps everything
    before, and says so."""
    d = tmp_path / "log"
    with LogStore(d) as log:
        for q in range(10):
            log.append(1, 1, q, b"x" * 100)
        log.flush()                              # one record: 0..9
        for q in range(10, 20):
            log.append(1, 1, q, b"y" * 100)
        log.flush()                              # the next: 10..19
    (path,) = segs(d)
    last = records(path)[-1]
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 30)                    # the last record is torn
    with LogStore(d) as log:
        assert [q for q in range(20) if log.has(1, 1, q)] == list(range(10))
        assert log.stats()["recovered_truncated_bytes"] == last[1] - 30
        assert log.recovery()["damaged_records"] == 0 and not len(log.damaged(1, 1))
        # and appending continues cleanly after the cut
        assert log.append(1, 1, 10, b"again")
        log.sync()
    with LogStore(d) as log:
        assert log.read(1, 1, 10) == (b"again", None)


def write_runs(d, streams=2, runs=6, per_run=40, segment_bytes=64 << 20):
    """A log of `runs` flushed records per stream, interleaved; returns the
    ids appended {(s, q): payload}."""
    ids = {}
    with LogStore(d, segment_bytes=segment_bytes) as log:
        for r in range(runs):
            for s in range(1, streams + 1):
                for q in range(r * per_run, (r + 1) * per_run):
                    log.append(s, 7, q, payload(s, q), label=q if q % 5 == 0 else None)
                    ids[(s, q)] = payload(s, q)
                log.flush()
        log.sync()
    return ids


def flip(path, offset):
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ 0x5A]))


def check_nothing_silent(log, ids, streams=2):
    """Every id appended is read back intact or reported damaged; returns
    the damaged ones."""
    damaged = set()
    for s in range(1, streams + 1):
        for a, b in log.damaged(s, 7).tolist():
            damaged |= {(s, q) for q in range(a, b + 1)}
    for (s, q), p in ids.items():
        if (s, q) in damaged:
            assert not log.has(s, 7, q)
            continue
        got = log.read(s, 7, q)
        assert got == (p, q if q % 5 == 0 else None), (s, q)
    return damaged


def test_flipped_byte_in_the_last_segment_is_damage_not_a_torn_tail(tmp_path, caplog):
    """Issue 14: one flipped byte in the newest segment was taken for a torn
    tail and the file cut there, deleting every acknowledged record after
    it.  Now the damaged record's ids are reported (and answered as lost),
    every record after it is kept, and opening says so on the log (stderr)."""
    d = tmp_path / "log"
    ids = write_runs(d)
    (path,) = segs(d)
    recs = records_with_sender(path)
    off, reclen, seq, count, sender = recs[3]
    flip(path, off + HDR + 20)                   # a payload byte of the 4th record
    with caplog.at_level(logging.WARNING, logger="rpbcast.log"):
        log = LogStore(d)
    with log:
        damaged = check_nothing_silent(log, ids)
        assert damaged == {(sender, q) for q in range(seq, seq + count)}
        r = log.recovery()
        assert r["damaged_records"] == 1 and r["damaged_ids"] == count and r["truncated_bytes"] == 0
        assert r["records"] == len(ids) - count
    assert any("DAMAGED" in m for m in caplog.messages)
    assert os.path.getsize(path) == recs[-1][0] + recs[-1][1]       # nothing cut


def test_flipped_byte_in_the_last_record_of_the_newest_segment_is_kept(tmp_path):
    """Even the very last record: complete, so damaged, not torn."""
    d = tmp_path / "log"
    ids = write_runs(d)
    (path,) = segs(d)
    off, reclen, seq, count = records(path)[-1]
    size = os.path.getsize(path)
    flip(path, off + reclen // 2)
    with LogStore(d) as log:
        damaged = check_nothing_silent(log, ids)
        assert len(damaged) == count
        assert log.recovery()["truncated_bytes"] == 0
    assert os.path.getsize(path) == size


def test_flipped_byte_in_a_middle_segment_keeps_the_records_after_it(tmp_path):
    """Issue 14: in a middle segment the records after the flip vanished."""
    d = tmp_path / "log"
    ids = write_runs(d, runs=12, segment_bytes=6000)
    paths = segs(d)
    assert len(paths) >= 4
    mid = paths[len(paths) // 2]
    recs = records(mid)
    off, reclen, seq, count = recs[0]
    flip(mid, off + HDR + 5)
    with LogStore(d, segment_bytes=6000) as log:
        damaged = check_nothing_silent(log, ids)
        assert len(damaged) == count
        assert log.recovery()["records"] == len(ids) - count


def test_damaged_headers_and_trailers_lose_nothing(tmp_path):
    """A record's header is repeated as its trailer: a hit on either is
    checked by the other copy, and nothing is lost at all."""
    d = tmp_path / "log"
    ids = write_runs(d)
    (path,) = segs(d)
    recs = records(path)
    flip(path, recs[1][0] + 9)                          # reclen field of a header
    flip(path, recs[2][0] + recs[2][1] - HDR + 26)      # seq field of a trailer
    flip(path, recs[-1][0] + 1)                         # the last record's magic
    flip(path, 3)                                       # the segment header
    with LogStore(d) as log:
        assert check_nothing_silent(log, ids) == set()
        r = log.recovery()
        assert r["repaired_records"] == 4 and r["damaged_records"] == r["damaged_bytes"] == 0
    with LogStore(d) as log:                    # the copies were rewritten
        assert check_nothing_silent(log, ids) == set()
        assert log.recovery()["repaired_records"] == 0


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_any_flipped_byte_loses_at_most_its_record_and_never_silently(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("log")
    ids = write_runs(d, runs=3, per_run=15, segment_bytes=3000)
    paths = segs(d)
    path = data.draw(st.sampled_from(paths))
    size = os.path.getsize(path)
    offset = data.draw(st.integers(0, size - 1))
    flip(path, offset)
    with LogStore(d, segment_bytes=3000) as log:
        damaged = check_nothing_silent(log, ids)
        per_run = 15
        assert len(damaged) <= per_run          # one record at most
        assert log.recovery()["truncated_bytes"] == 0


def test_damage_found_when_reading_later_is_reported(tmp_path):
    """A record that goes bad on disk while the log is open: a read fails
    loudly and the ids are damaged from then on; the rest still reads."""
    d = tmp_path / "log"
    with LogStore(d) as log:
        for q in range(30):
            log.append(1, 1, q, payload(1, q))
            if q % 10 == 9:
                log.flush()
        (path,) = segs(d)
        off, reclen, seq, count = records(path)[1]
        flip(path, off + HDR + 7)
        with pytest.raises(LogError):
            log.read(1, 1, 12)
        assert log.damaged(1, 1).tolist() == [[10, 19]]
        assert not log.has(1, 1, 15)
        assert [q for q, _, _ in log.read_range(1, 1, 0, 29)] == list(range(10)) + list(range(20, 30))
        assert log.stats()["damaged_on_read"] == 1


def test_a_record_at_an_absurd_seq_reopens_in_bounded_memory(tmp_path):
    """Issue 14: a forged DATA at seq + 2^32 was logged, and the logger could
    not restart (MemoryError allocating 32 GiB in LogStore.seqs).  The index
    and everything derived from it are bounded by records."""
    d = tmp_path / "log"
    with LogStore(d) as log:
        for q in range(10):
            log.append(1, 1, q, b"ok")
        log.append(1, 1, 1 << 63, b"forged")
        log.append(1, 1, (1 << 64) - 1, b"forged too")
        log.append(1, 1, 10 + (1 << 32), b"far")
        log.sync()
    with LogStore(d) as log:
        assert log.read(1, 1, 1 << 63) == (b"forged", None)
        assert log.intervals(1, 1).tolist() == [[0, 9], [10 + (1 << 32), 10 + (1 << 32)],
                                                [1 << 63, 1 << 63], [(1 << 64) - 1, (1 << 64) - 1]]
        assert len(log.seqs(1, 1)) == 13
        assert log.streams() == [(1, 1, 13, 0, (1 << 64) - 1)]


def test_old_format_logs_are_converted(tmp_path):
    """Logs written by the previous format (a 48-byte header and a CRC per
    message, no segment header) are read and converted on open."""
    d = tmp_path / "log"
    os.makedirs(d)

    def v0(sender, inc, seq, data, label=2**64 - 1):
        body = struct.pack("<IIIQQqII", 48 + len(data), sender, inc, seq, label, 0, 0, len(data)) + data
        return struct.pack("<I", crc32c(body)) + body

    with open(d / "seg-00000000000000000000.rplog", "wb") as f:
        for q in range(50):
            f.write(v0(3, 4, q, payload(3, q), q if q % 2 else 2**64 - 1))
    with open(d / "seg-00000000000000000001.rplog", "wb") as f:
        for q in range(50, 60):
            f.write(v0(3, 4, q, payload(3, q)))
        f.write(v0(3, 4, 60, b"torn")[:20])            # the old writer's torn tail
    with LogStore(d) as log:
        assert log.recovery()["converted_records"] == 60
        assert log.intervals(3, 4).tolist() == [[0, 59]]
        assert all(log.read(3, 4, q) == (payload(3, q), q if (q % 2 and q < 50) else None) for q in range(60))
    assert [os.path.basename(p) for p in segs(d)] == ["seg-00000000000000000002.rplog"]
    with LogStore(d) as log:                           # and it is a v1 log now
        assert log.recovery()["converted_records"] == 0 and log.intervals(3, 4).tolist() == [[0, 59]]


def test_durable_only_after_a_completed_sync(tmp_path):
    with LogStore(tmp_path / "log") as log:
        log.append(1, 1, 0, b"a")
        assert log.has(1, 1, 0) and not log.durable(1, 1, 0)
        log.flush()
        assert not log.durable(1, 1, 0)          # written, not synced
        e = log.sync_start()
        for _ in range(2000):
            if log.synced_epoch() >= e:
                break
            import time
            time.sleep(0.001)
        assert log.synced_epoch() >= e and log.durable(1, 1, 0)
        log.append(1, 1, 1, b"b")
        assert not log.durable(1, 1, 1)
        log.sync()
        assert log.durable(1, 1, 1) and log.stats()["synced"] == 2


def test_segments_roll_over_and_gc_deletes_whole_segments(tmp_path):
    d = tmp_path / "log"
    with LogStore(d, segment_bytes=4096) as log:
        for q in range(400):
            log.append(1, 1, q, bytes(52))
            if q % 20 == 19:
                log.flush()
        log.sync()
        n0 = len(segs(d))
        assert n0 >= 6
        dropped = log.gc(1, 1, 200)
        assert dropped == 200
        assert not log.has(1, 1, 199) and log.has(1, 1, 200)
        n1 = len(segs(d))
        assert n1 < n0 and n1 >= n0 // 2
        log.gc(1, 1, 400)
        assert len(segs(d)) == 1             # the newest segment is kept
    with LogStore(d, segment_bytes=4096) as log:
        assert all(not log.has(1, 1, q) for q in range(0, 300))


def test_reads_across_segments_keep_files_open(tmp_path):
    """Serving a range from older segments costs a pread per read-ahead, not
    an open/pread/close per record."""
    d = tmp_path / "log"
    with LogStore(d, segment_bytes=1 << 16) as log:
        for q in range(20000):
            log.append(1, 1, q, bytes(20))
        log.sync()
        assert log.stats()["segments"] >= 8
        before = log.stats()["preads"]
        got = log.read_range(1, 1, 0, 19999)
        assert [q for q, _, _ in got] == list(range(20000))
        assert log.stats()["preads"] - before <= 2 * log.stats()["segments"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 2), st.integers(0, 300), st.binary(max_size=40)),
    st.tuples(st.just("reopen"), st.just(0), st.just(0), st.just(b"")),
    st.tuples(st.just("flush"), st.just(0), st.just(0), st.just(b"")),
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
            elif op == "flush":
                log.flush()
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
            for ss in range(3):
                want = sorted(qq for (s2, qq) in model if s2 == ss)
                assert [qq for qq, _, _ in log.read_range(ss, 1, 0, 400)] == want
    finally:
        log.close()


def test_a_forked_childs_copy_neither_hangs_nor_writes(tmp_path):
    """A process forked while a log is open (a worker pool) inherits the
    log but not its sync thread: letting go of the copy must not wait for
    that thread (the full suite hung there) nor write the parent's
    buffered records into the parent's files."""
    d = tmp_path / "log"
    log = LogStore(d)
    for q in range(10):
        log.append(1, 1, q, payload(1, q))
    log.wait_synced(log.sync_start())           # the sync thread exists
    for q in range(10, 20):
        log.append(1, 1, q, payload(1, q))      # buffered, not yet written
    pid = os.fork()
    if pid == 0:
        try:
            log.close()
            del_ok = 0
        except BaseException:
            del_ok = 1
        os._exit(del_ok)
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung letting go of the log")
        time.sleep(0.01)
    assert os.waitstatus_to_exitcode(status) == 0
    log.close()
    with LogStore(d) as again:
        r = again.recovery()
        assert r["records"] == 20 and r["damaged_records"] == 0
        assert [again.read(1, 1, q)[0] for q in range(20)] == [payload(1, q) for q in range(20)]
