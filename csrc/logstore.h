/* A logger's log on stable storage (thesis §3.2, §5.2).
 *
 * Append-only segment files "seg-<n>.rplog" in one directory.  Format v1
 * (docs/wire-format.md, "The logger's log"): a segment starts with a 16-byte
 * header (magic "rplogseg", u32 version, u32 CRC32C of the first 12 bytes),
 * then records.  A record is a *run*: consecutive seqs of one stream,
 *
 *   header   u32 magic, u32 hcrc (CRC32C of bytes 8..39), u32 reclen,
 *            u32 count, u32 sender, u32 inc, u64 seq (the first),
 *            u32 bcrc (CRC32C of the body), u32 flags
 *   body     per message: u32 len (| RP_LOG_E_LABEL: a u64 label follows), payload
 *   trailer  the header again, with the trailer magic
 *
 * so there is one CRC per run, not per message, and a record is
 * self-delimiting: recovery finds the next record after a damaged one by its
 * magic and header CRC, and the trailer still names a record whose header
 * was hit.  A run grows while messages of its stream arrive in order, up to
 * RP_LOG_RUN_BYTES of body, and ends at a flush (so a sync covers whole
 * records: group commit).
 *
 * Opening a directory recovers it and reports what it found:
 *   - a record whose header and body check is indexed;
 *   - a record with a bad body but a good header (or trailer) is *damaged*:
 *     its ids go to the stream's damaged set (a logger answers requests for
 *     them with "lost"), the records after it are kept;
 *   - a record with a bad header but a good trailer and body is recovered;
 *   - bytes that name no record are counted as damaged bytes and skipped to
 *     the next record;
 *   - only an incomplete last record of the newest segment (a torn tail: an
 *     interrupted write) is cut off.
 * Segments of the old format (v0: a 48-byte header and a CRC per message,
 * no segment header) are converted on open: their records are appended as
 * runs, synced, and the old files removed.
 *
 * Memory is bounded by records, never by seq span: a stream's index is a
 * sorted array of runs (first seq, count, position), so a forged record at
 * seq 2^63 costs one entry.  Reads keep segment files open (a small fd
 * cache) and read ahead: consecutive records cost one pread per
 * RP_LOG_READ_AHEAD bytes.
 *
 * Appends go through a write buffer and reach the file on flush; sync()
 * flushes and fdatasyncs.  Where the file system takes O_DIRECT (the
 * default; else buffered writes as before), a full buffer or a group commit
 * hands the buffer to the log's thread, which writes it straight to the
 * device (no copy into the page cache, no writeback) while the appender
 * fills the other one; the partial last block is written again with the
 * next buffer.  A flush still returns only once the file has the bytes.  sync_start() hands the fdatasync to a thread of
 * the log's own (group commit: the appender never waits for the disk, one
 * fdatasync covers everything flushed before it); synced_epoch() says which
 * sync completed.  A logger acknowledges only what a completed sync covers.
 *
 * Streams are (sender, inc) pairs numbered locally; GC is by stream
 * frontier: a segment is deleted once every record in it is below its
 * stream's collectable frontier.
 */
#ifndef RP_LOGSTORE_H
#define RP_LOGSTORE_H

#include <pthread.h>

#include "hmap.h"
#include "iset.h"

#define RP_LOG_VERSION 1
#define RP_LOG_SEG_HDR 16
#define RP_LOG_HDR 40                       /* record header, and trailer */
#define RP_LOG_TRL RP_LOG_HDR
#define RP_LOG_MAGIC 0x31525052u            /* "RPR1" */
#define RP_LOG_TMAGIC 0x31545052u           /* "RPT1" */
#define RP_LOG_E_LABEL 0x80000000u          /* entry length flag: a label follows */
#define RP_LOG_MAX_PAYLOAD (1u << 20)
#define RP_LOG_RUN_BYTES (16u << 10)        /* a run stops growing at this much body */
#define RP_LOG_MAX_RECORD (RP_LOG_HDR + 12 + RP_LOG_MAX_PAYLOAD + RP_LOG_TRL)
#define RP_LOG_READ_AHEAD (256u << 10)
#define RP_LOG_FD_CACHE 16                  /* segment files kept open for reading */
#define RP_LOG_DAMAGED_MAX 65536            /* damaged intervals remembered per stream */
#define RP_LOG_V0_HDR 48                    /* the old format's per-message header */
#define RP_LOG_ALIGN 4096u                  /* direct writes: offset, length and buffer alignment */
#define RP_LOG_WBUF (4u << 20)              /* write buffer, beyond one largest record */

/* The log's read results (rp_log_read, rp_log_next). */
enum {
    RP_LOG_ABSENT = -1,     /* not logged (or collected) */
    RP_LOG_IOERR = -2,      /* the file could not be read */
    RP_LOG_DAMAGED = -3,    /* the record failed its check: its ids are now damaged */
};

uint32_t rp_crc32c(uint32_t crc, const void *data, size_t len);
uint32_t rp_crc32c_sw(uint32_t crc, const void *data, size_t len);   /* table version, for tests */

/* One run in a stream's index: seqs first .. first + count - 1 are in the
 * record at pos (segment no << 40 | offset); the record may start earlier
 * (GC trims an entry from the front). */
typedef struct {
    uint64_t first;
    uint64_t pos;
    uint32_t count;
    uint32_t pad;
} rp_lrun_t;

/* A stream's runs by first seq, non-overlapping: `main` grows at its end
 * (in-order appends), out-of-order runs (fills) go to the small sorted
 * `side` array, merged into main when it grows past a fraction of it. */
typedef struct {
    rp_lrun_t *main;
    size_t head, n, cap;        /* live entries: main[head .. n) */
    rp_lrun_t *side;
    size_t nside, sidecap;
} rp_lridx_t;

typedef struct {
    uint32_t sender, inc;
    rp_lridx_t idx;
    uint64_t gc_below;          /* records with seq < gc_below may go */
    uint64_t count;             /* ids indexed */
    uint64_t min_seq, max_seq;  /* of indexed ids (valid if count) */
    rp_iset_t damaged;          /* ids whose record failed its check */
} rp_lstream_t;

typedef struct {
    uint64_t no;                /* segment number */
    uint64_t size;              /* bytes */
    uint32_t nstreams, scap;
    uint32_t *sid;              /* streams present ... */
    uint64_t *maxseq;           /* ... and their highest seq here */
    uint64_t *minseq;
    int fd;                     /* open for reading (fd cache), or -1 */
    uint64_t used;              /* fd cache clock of its last read */
} rp_lseg_t;

/* The run being written: it grows while its stream's next seq arrives. */
typedef struct {
    int open;
    uint32_t sid, count;
    uint64_t seq, next;         /* first seq, and the one that would extend it */
    size_t hdr;                 /* its header's offset in wbuf */
    size_t body;                /* body bytes so far */
    rp_lrun_t *entry;           /* its index entry (stable while the run is open) */
} rp_lopen_t;

/* A read position in a stream (serving ranges in order). */
typedef struct {
    uint32_t sid;
    uint64_t seq;               /* the next seq wanted */
    const uint8_t *rec;         /* the current record (NULL: none loaded) */
    uint64_t rseq;              /* the seq of the entry at eoff */
    uint32_t rleft;             /* entries left in the record from eoff on */
    size_t eoff;                /* offset of the next entry in rec */
    uint64_t elast;             /* last seq the index entry covers */
    uint64_t gen;               /* the log's read generation rec belongs to */
    int done;                   /* the last seq possible was read */
} rp_log_cursor_t;

typedef struct {
    char *dir;
    int fd;                     /* current (newest) segment */
    rp_lseg_t *segs;
    uint32_t nsegs, segcap;
    uint64_t seg_limit;         /* roll over beyond this size */
    uint8_t *wbuf;
    size_t wlen, wcap;
    uint64_t wpos;              /* file offset where wbuf starts (block-aligned when direct) */
    int direct;                 /* the current segment is open O_DIRECT; its writes go via the log's thread */
    int want_direct;            /* try O_DIRECT (rp_log_open_mode) */
    size_t wsent;               /* direct: wbuf bytes already handed to the thread (the partial block) */
    uint64_t wdone;             /* direct: the current segment's bytes below this are in the file */
    uint8_t *xbuf;              /* direct: the buffer last handed to the thread ... */
    size_t xlen;                /* ... its bytes, */
    uint64_t xpos, xseg;        /* ... their file offset and segment (xseg UINT64_MAX: none) */
    int xfd, xbusy, xerr;       /* the thread is writing it (under smu); the first write error */
    int rfd;                    /* direct: a buffered descriptor to read the current segment */
    uint64_t n_writes;          /* direct writes done */
    rp_lopen_t run;
    rp_lstream_t *streams;
    uint32_t nstreams, stcap;
    rp_hmap_t sindex;           /* (sender<<32|inc) -> stream id */
    uint64_t appended, synced;  /* messages appended, covered by the last completed sync */
    uint64_t bytes;
    uint64_t runs;              /* records written */
    /* reading */
    uint8_t *rbuf;              /* read-ahead: file bytes [roff, roff + rlen) of segment rseg */
    size_t rcap, rlen;
    uint64_t rseg, roff;
    uint64_t verified;          /* position + 1 of the last record whose CRCs checked */
    uint64_t rgen;              /* bumped whenever bytes a cursor may point at move */
    uint64_t walk_pos, walk_gen, walk_seq;   /* where the last cursor_load stopped in a record */
    size_t walk_off;            /* (0: nowhere) */
    uint64_t fd_clock;
    uint64_t n_preads;
    /* recovery report (at open) */
    uint64_t rec_records, rec_runs;
    uint64_t rec_damaged_records, rec_damaged_ids, rec_damaged_bytes;
    uint64_t rec_repaired;      /* a header or trailer was hit, the record checked by the other */
    uint64_t rec_truncated_bytes, rec_bad;
    uint64_t rec_converted;     /* old-format (v0) records converted */
    uint64_t rd_damaged;        /* records that failed their check when read later */
    /* group commit: the syncer thread */
    pthread_mutex_t smu;
    pthread_cond_t scv;
    pthread_t syncer;
    int syncer_on, sync_stop, sync_busy, sync_err;
    int owner;                  /* pid that opened the log: a forked child's copy only lets go */
    uint64_t sync_want, sync_done;          /* epochs */
    uint64_t sync_want_appended;
    uint64_t sync_seg, sync_off;            /* what the last completed sync covers */
    uint64_t want_seg, want_off;
    uint64_t n_syncs;
} rp_log_t;

/* Open (creating if needed) and recover the log in dir.  Returns 0 or a
 * negative errno-style code (-errno from the failing system call). */
int  rp_log_open(rp_log_t *l, const char *dir, uint64_t seg_limit);
/* The same; direct 0: buffered writes even where O_DIRECT works (a log
 * whose flush must be quick and need not be durable: fsync "never"). */
int  rp_log_open_mode(rp_log_t *l, const char *dir, uint64_t seg_limit, int direct);
void rp_log_close(rp_log_t *l);
/* Close as a killed process would: records still in the write buffer (not
 * yet written to the file) are lost; what was written survives.  Tests use
 * it to crash a logger for real. */
void rp_log_abandon(rp_log_t *l);

/* Stream id of (sender, inc), created on first use; < 0 on error. */
int64_t rp_log_stream(rp_log_t *l, uint32_t sender, uint32_t inc);
/* Stream id of (sender, inc), or -1 if the log never saw it. */
int64_t rp_log_find_stream(const rp_log_t *l, uint32_t sender, uint32_t inc);

/* Append a message.  Returns 0, 1 if (stream, seq) was already logged or
 * lies below the stream's GC frontier (nothing written), or a negative error. */
int rp_log_append(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq, uint64_t label,
                  int64_t t, const uint8_t *payload, uint32_t plen);

/* Write buffered records to the file (no fsync); ends the open run. */
int rp_log_flush(rp_log_t *l);

/* Flush and fsync: everything appended so far is durable on return 0. */
int rp_log_sync(rp_log_t *l);

/* Group commit: flush, and have the syncer thread fdatasync what was
 * written (if it is busy, it syncs again as soon as it is done).  *epoch is
 * the number of this request: once rp_log_synced_epoch() reaches it,
 * everything appended before this call is durable.  0 or a negative error. */
int rp_log_sync_start(rp_log_t *l, uint64_t *epoch);
/* The latest epoch whose sync completed; *err the first sync error (0). */
uint64_t rp_log_synced_epoch(rp_log_t *l, int *err);
/* Wait until epoch's sync completed.  0, or the first sync error. */
int rp_log_wait_synced(rp_log_t *l, uint64_t epoch);

/* 1 if (sender, inc, seq) is logged. */
int rp_log_has(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq);
/* 1 if it is logged and a completed sync covers its record. */
int rp_log_durable(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq);

/* Read a message: payload (valid until the next read or append) and its
 * label.  Returns the payload length, RP_LOG_ABSENT, RP_LOG_IOERR or
 * RP_LOG_DAMAGED (the record failed its check; its ids are damaged now). */
long rp_log_read(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq, const uint8_t **payload,
                 uint64_t *label);

/* Position a cursor at the first logged seq >= seq of (sender, inc).
 * Returns 0, or RP_LOG_ABSENT if the stream is unknown.  A cursor stays
 * valid across appends, flushes and other reads (it finds its place again
 * by seq when the bytes it pointed at moved). */
int rp_log_seek(rp_log_t *l, rp_log_cursor_t *c, uint32_t sender, uint32_t inc, uint64_t seq);
/* The next logged message with seq <= hi, in seq order: returns its payload
 * length and sets *seq, *payload (valid until the next read), *label;
 * RP_LOG_ABSENT when there is none left up to hi; RP_LOG_DAMAGED when a
 * record failed its check (its ids are skipped and marked damaged; call
 * again to go on); RP_LOG_IOERR. */
long rp_log_next(rp_log_t *l, rp_log_cursor_t *c, uint64_t hi, uint64_t *seq, const uint8_t **payload,
                 uint64_t *label);

/* Add the logged ids of [lo, hi] of stream sid to out (as intervals).
 * Returns the number of ids added, or a negative error. */
int64_t rp_log_cover(const rp_log_t *l, uint32_t sid, uint64_t lo, uint64_t hi, rp_iset_t *out);

/* The logged ids of a stream as sorted, merged intervals: calls fn for each
 * (lo, hi) in order.  Bounded by records, not by seq span. */
void rp_log_intervals(const rp_log_t *l, uint32_t sid, void (*fn)(void *, uint64_t, uint64_t), void *arg);

/* Everything of (sender, inc) below seq may be collected, and is refused
 * by later appends.  Returns the number of ids dropped from the index (< 0
 * on error); segments whose records are all collectable are deleted (the
 * newest segment never is). */
int64_t rp_log_gc(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t below);

/* Delete segments that are fully collectable. */
int rp_log_gc_segments(rp_log_t *l);

#endif
