/* A logger's log on stable storage (thesis §3.2, §5.2).
 *
 * Append-only segment files "seg-<n>.rplog" in one directory.  A record is
 *
 *   u32 crc32c   over everything after this field
 *   u32 reclen   total record length, header included
 *   u32 sender, u32 inc, u64 seq, u64 label, i64 t, u32 flags, u32 plen
 *   payload[plen]
 *
 * Appends go through a buffer and reach the file on flush; sync() flushes
 * and fsyncs.  The fsync policy is the caller's (every batch, every N ms,
 * never): a logger acknowledges only what a completed sync covers.
 *
 * Opening a directory recovers it: every record is checked (length bounds,
 * CRC); a bad or torn record at the end of the newest segment is cut off
 * (the tail of an interrupted write), a bad record elsewhere ends that
 * segment's scan and is counted.  The index (stream, seq) -> file position
 * is rebuilt, so a restarted logger keeps serving repairs.
 *
 * Streams are (sender, inc) pairs numbered locally; GC is by stream frontier:
 * a segment is deleted once every record in it is below its stream's
 * collectable frontier.
 */
#ifndef RP_LOGSTORE_H
#define RP_LOGSTORE_H

#include "hmap.h"

#define RP_LOG_HDR 48
#define RP_LOG_MAX_PAYLOAD (1u << 20)

uint32_t rp_crc32c(uint32_t crc, const void *data, size_t len);
uint32_t rp_crc32c_sw(uint32_t crc, const void *data, size_t len);   /* table version, for tests */

/* Positions of one stream's records by seq, in pages of RP_LPAGE entries
 * allocated on demand: a record's lookup is two array indexings, and
 * streams (mostly consecutive seqs) cost 8 bytes per record. */
#define RP_LPAGE_BITS 12
#define RP_LPAGE (1u << RP_LPAGE_BITS)

typedef struct {
    uint64_t **pages;           /* pages[k] covers seqs (first_page + k) << BITS ... */
    uint64_t first_page, npages;
    uint32_t *fill;             /* entries used per page */
} rp_lpidx_t;

typedef struct {
    uint32_t sender, inc;
    rp_lpidx_t idx;             /* seq -> (segment no << 40 | offset) + 1, 0 = none */
    uint64_t gc_below;          /* records with seq < gc_below may go */
    uint64_t count;             /* records indexed */
    uint64_t min_seq, max_seq;  /* of indexed records (valid if count) */
} rp_lstream_t;

typedef struct {
    uint64_t no;                /* segment number */
    uint64_t size;              /* bytes */
    uint32_t nstreams, scap;
    uint32_t *sid;              /* streams present ... */
    uint64_t *maxseq;           /* ... and their highest seq here */
    uint64_t *minseq;
} rp_lseg_t;

typedef struct {
    char *dir;
    int fd;                     /* current (newest) segment */
    rp_lseg_t *segs;
    uint32_t nsegs, segcap;
    uint64_t seg_limit;         /* roll over beyond this size */
    uint8_t *wbuf;
    size_t wlen, wcap;
    uint64_t wpos;              /* file offset where wbuf starts */
    rp_lstream_t *streams;
    uint32_t nstreams, stcap;
    rp_hmap_t sindex;           /* (sender<<32|inc) -> stream id */
    uint64_t appended, synced;  /* record counters */
    uint64_t bytes;
    /* recovery report */
    uint64_t rec_records, rec_bad, rec_truncated_bytes;
    uint8_t *rbuf;
    size_t rcap;
} rp_log_t;

/* Open (creating if needed) and recover the log in dir.  Returns 0 or a
 * negative errno-style code (-errno from the failing system call). */
int  rp_log_open(rp_log_t *l, const char *dir, uint64_t seg_limit);
void rp_log_close(rp_log_t *l);
/* Close as a killed process would: records still in the write buffer (not
 * yet written to the file) are lost; what was written survives.  Tests use
 * it to crash a logger for real. */
void rp_log_abandon(rp_log_t *l);

/* Stream id of (sender, inc), created on first use; < 0 on error. */
int64_t rp_log_stream(rp_log_t *l, uint32_t sender, uint32_t inc);

/* Append a record.  Returns 0, 1 if (stream, seq) was already logged or
 * lies below the stream's GC frontier (nothing written), or a negative error. */
int rp_log_append(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq, uint64_t label,
                  int64_t t, const uint8_t *payload, uint32_t plen);

/* Write buffered records to the file (no fsync). */
int rp_log_flush(rp_log_t *l);

/* Flush and fsync: everything appended so far is durable on return 0. */
int rp_log_sync(rp_log_t *l);

/* 1 if (sender, inc, seq) is logged. */
int rp_log_has(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq);

/* Read a record: payload (valid until the next read) and its label.
 * Returns payload length, -1 if absent, or another negative on I/O or CRC
 * failure. */
long rp_log_read(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq, const uint8_t **payload,
                 uint64_t *label);

/* Everything of (sender, inc) below seq may be collected, and is refused
 * by later appends.  Returns the number of index entries dropped (< 0 on
 * error); segments whose records are all
 * collectable are deleted (the newest segment never is). */
int64_t rp_log_gc(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t below);

/* Delete segments that are fully collectable. */
int rp_log_gc_segments(rp_log_t *l);

#endif
