"""The log writes its segments straight to the device (O_DIRECT) from its
own thread, through two block-aligned buffers (csrc/logstore.c, issue 13:
the logger at line rate).  What that must keep: every read returns what was
appended while a buffer is being written, across buffers and segment rolls;
a crash mid-write loses nothing a completed sync covered and the block
padding is not mistaken for damage; and the page cache is not filled with
the log (the copy into it and its writeback were a third of the logger's
CPU at line rate)."""
import ctypes
import mmap
import os

import pytest

from rpbcast.core.logstore import LogStore

from tests.test_logstore import payload, segs

libc = ctypes.CDLL(None, use_errno=True)
PAGE = os.sysconf("SC_PAGE_SIZE")


def resident_fraction(path):
    """Share of the file's pages in the page cache (mincore)."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY)    # private: never written
        try:
            n = (size + PAGE - 1) // PAGE
            vec = (ctypes.c_ubyte * n)()
            buf = (ctypes.c_char * size).from_buffer(m)
            addr = ctypes.addressof(buf)
            rc = libc.mincore(ctypes.c_void_p(addr), ctypes.c_size_t(size), vec)
            del buf
            assert rc == 0, ctypes.get_errno()
            return sum(v & 1 for v in vec) / n
        finally:
            m.close()


def direct_capable(path):
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o644)
    except OSError:
        return False
    os.close(fd)
    os.unlink(path)
    return True


def test_logged_bytes_do_not_fill_the_page_cache(tmp_path):
    if not direct_capable(str(tmp_path / "probe")):
        pytest.skip("this file system takes no O_DIRECT: the log writes through the page cache there")
    body = os.urandom(1000)
    with LogStore(tmp_path / "log") as log:
        for q in range(12_000):                  # 12 MB: three buffers' worth
            log.append(1, 1, q, body)
        log.sync()
        (path,) = segs(tmp_path / "log")
        # buffered writes leave every page of a just-written file resident
        assert resident_fraction(path) < 0.1
        assert all(log.read(1, 1, q)[0] == body for q in range(0, 12_000, 997))


def test_reads_are_right_while_buffers_are_written_and_segments_roll(tmp_path):
    with LogStore(tmp_path / "log", segment_bytes=1 << 20) as log:
        epochs = []
        q = 0
        for step in range(30):
            for _ in range(3_000):              # ~0.35 MB a step
                log.append(1, 1, q, payload(1, q) + b"#" * (q % 97))
                q += 1
            epochs.append(log.sync_start())     # hands the buffer to the log's thread
            # everything appended so far reads back, wherever it is now:
            # the buffer being filled, the one being written, or the file
            for lo in (0, max(0, q - 5_000), q - 10):
                got = list(log.read_range(1, 1, lo, lo + 40))
                assert [s for s, _, _ in got] == list(range(lo, min(q, lo + 41)))
                assert all(p == payload(1, s) + b"#" * (s % 97) for s, p, _ in got)
        log.wait_synced(epochs[-1])
        assert len(segs(tmp_path / "log")) > 3
        assert list(log.seqs(1, 1)) == list(range(q))
    with LogStore(tmp_path / "log", segment_bytes=1 << 20) as log:
        assert log.recovery()["damaged_records"] == 0 and log.recovery()["damaged_bytes"] == 0
        assert all(log.read(1, 1, s)[0] == payload(1, s) + b"#" * (s % 97) for s in range(0, q, 101))


def test_a_crash_after_a_sync_keeps_what_it_covered_and_padding_is_not_damage(tmp_path):
    d = tmp_path / "log"
    log = LogStore(d)
    for q in range(1_000):
        log.append(1, 1, q, payload(1, q))
    log.wait_synced(log.sync_start())
    for q in range(1_000, 1_300):
        log.append(1, 1, q, payload(1, q))      # never synced: may or may not survive
    log.abandon()                               # as a killed process
    with LogStore(d) as log:
        r = log.recovery()
        assert r["damaged_records"] == 0 and r["damaged_bytes"] == 0 and r["truncated_bytes"] == 0
        seqs = list(log.seqs(1, 1))
        assert seqs[:1_000] == list(range(1_000))
        assert all(log.read(1, 1, s)[0] == payload(1, s) for s in seqs)
        # appending after the recovered tail (an unaligned end) goes on cleanly
        for q in range(seqs[-1] + 1, seqs[-1] + 500):
            log.append(1, 1, q, payload(1, q))
        log.sync()
        top = seqs[-1] + 499
    with LogStore(d) as log:
        assert list(log.seqs(1, 1)) == list(range(top + 1))
        assert log.recovery()["truncated_bytes"] == 0


def test_a_buffered_log_on_request_and_for_a_logger_that_never_syncs(tmp_path):
    """fsync "never" acknowledges at a flush: a direct write would make
    each flush wait for the device (0.2-1 ms every fsync_interval), so that
    logger writes through the page cache; "interval" and "always" go
    direct."""
    from rpbcast.config import Config, MemberSpec
    from rpbcast.protocol.engine import Engine
    direct_ok = direct_capable(str(tmp_path / "probe"))
    with LogStore(tmp_path / "buffered", direct=False) as log:
        for q in range(3_000):
            log.append(1, 1, q, os.urandom(1000))
        log.sync()
        assert log.stats()["direct"] is False
        assert resident_fraction(segs(tmp_path / "buffered")[0]) > 0.9
    members = [MemberSpec(node_id=i, addr=f"127.0.0.1:{7000 + i}", role="logger" if i == 9 else "member")
               for i in (1, 2, 9)]
    for fsync, want in (("never", False), ("interval", direct_ok), ("always", direct_ok)):
        cfg = Config(node_id=9, group=1, role="logger", log_dir=str(tmp_path / fsync), fsync=fsync,
                     members=members)
        eng = Engine(cfg, 1, log=None)
        assert eng.logger.log.stats()["direct"] is want, fsync
        eng.logger.log.close()
