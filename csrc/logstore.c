#define _GNU_SOURCE
#include "logstore.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#define NOLABEL UINT64_MAX       /* RP_SRB_NOLABEL: the message has no label */

/* ---- CRC32C (Castagnoli) ------------------------------------------------ */

static uint32_t crc_tab[8][256];
static int crc_ready;

static void crc_init(void) {
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
        crc_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
    crc_ready = 1;
}

static uint32_t crc32c_table(uint32_t crc, const void *data, size_t len);

#if defined(__x86_64__) && defined(__GNUC__)
/* The SSE4.2 crc32 instruction computes CRC32C, 8 bytes per instruction
 * but with a latency of three: one chain runs at a third of the unit's
 * speed.  Long buffers (a run's body) go as three interleaved lanes of
 * LANE bytes, combined by shifting the first two over the bytes after
 * them (a table per shift).  Compiled for that target only here, and used
 * only when the CPU has it, so the build stays portable. */
#define LANE 256
static uint32_t shift_tab[2][4][256];   /* [0]: over LANE bytes, [1]: over 2 x LANE */
static int shift_ready;

/* The raw CRC register v advanced over n zero bytes. */
static uint32_t zeros(uint32_t v, size_t n) {
    while (n--)
        v = (v >> 8) ^ crc_tab[0][v & 0xff];
    return v;
}

static void shift_init(void) {
    if (!crc_ready)
        crc_init();
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 4; k++)
            for (uint32_t b = 0; b < 256; b++)
                shift_tab[s][k][b] = zeros(b << (8 * k), (size_t)LANE * (s + 1));
    shift_ready = 1;
}

static inline uint32_t shift(int s, uint32_t v) {
    return shift_tab[s][0][v & 0xff] ^ shift_tab[s][1][(v >> 8) & 0xff] ^
           shift_tab[s][2][(v >> 16) & 0xff] ^ shift_tab[s][3][v >> 24];
}

__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const void *data, size_t len) {
    const uint8_t *p = (const uint8_t *)data;
    uint64_t c = ~crc;
    if (len >= 3 * LANE && shift_ready) {
        while (len >= 3 * LANE) {
            uint64_t c1 = 0, c2 = 0;
            for (size_t i = 0; i < LANE; i += 8) {
                uint64_t a, b, d;
                memcpy(&a, p + i, 8);
                memcpy(&b, p + LANE + i, 8);
                memcpy(&d, p + 2 * LANE + i, 8);
                c = __builtin_ia32_crc32di(c, a);
                c1 = __builtin_ia32_crc32di(c1, b);
                c2 = __builtin_ia32_crc32di(c2, d);
            }
            c = shift(1, (uint32_t)c) ^ shift(0, (uint32_t)c1) ^ (uint32_t)c2;
            p += 3 * LANE;
            len -= 3 * LANE;
        }
    }
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = __builtin_ia32_crc32di(c, v);
        p += 8;
        len -= 8;
    }
    uint32_t c32 = (uint32_t)c;
    while (len--)
        c32 = __builtin_ia32_crc32qi(c32, *p++);
    return ~c32;
}

static int hw_crc = -1;

uint32_t rp_crc32c(uint32_t crc, const void *data, size_t len) {
    if (RP_UNLIKELY(hw_crc < 0)) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("sse4.2"))
            shift_init();
        hw_crc = __builtin_cpu_supports("sse4.2") ? 1 : 0;
    }
    return hw_crc ? crc32c_hw(crc, data, len) : crc32c_table(crc, data, len);
}
#else
uint32_t rp_crc32c(uint32_t crc, const void *data, size_t len) {
    return crc32c_table(crc, data, len);
}
#endif

uint32_t rp_crc32c_sw(uint32_t crc, const void *data, size_t len) {
    return crc32c_table(crc, data, len);
}

static uint32_t crc32c_table(uint32_t crc, const void *data, size_t len) {
    if (!crc_ready)
        crc_init();
    const uint8_t *p = (const uint8_t *)data;
    crc = ~crc;
    while (len >= 8) {
        uint32_t a = rp_ld32(p) ^ crc, b = rp_ld32(p + 4);
        crc = crc_tab[7][a & 0xff] ^ crc_tab[6][(a >> 8) & 0xff] ^ crc_tab[5][(a >> 16) & 0xff] ^
              crc_tab[4][a >> 24] ^ crc_tab[3][b & 0xff] ^ crc_tab[2][(b >> 8) & 0xff] ^
              crc_tab[1][(b >> 16) & 0xff] ^ crc_tab[0][b >> 24];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ crc_tab[0][(crc ^ *p++) & 0xff];
    return ~crc;
}

/* ---- positions and record fields --------------------------------------- */

#define POS(seg, off) (((uint64_t)(seg) << 40) | (uint64_t)(off))
#define POS_SEG(p) ((p) >> 40)
#define POS_OFF(p) ((p) & (((uint64_t)1 << 40) - 1))

/* A record's fields, decoded from its header (or trailer). */
typedef struct {
    uint32_t reclen, count, sender, inc, bcrc;
    uint64_t seq;
} rec_t;

/* Decode a header or trailer with this magic: 1 if its CRC checks and its
 * fields are possible (a length that holds count entries, seqs that do not
 * wrap). */
static int hdr_check(const uint8_t *h, uint32_t magic, rec_t *r) {
    if (rp_ld32(h) != magic || rp_crc32c(0, h + 8, RP_LOG_HDR - 8) != rp_ld32(h + 4))
        return 0;
    r->reclen = rp_ld32(h + 8);
    r->count = rp_ld32(h + 12);
    r->sender = rp_ld32(h + 16);
    r->inc = rp_ld32(h + 20);
    r->seq = rp_ld64(h + 24);
    r->bcrc = rp_ld32(h + 32);
    uint64_t body = (uint64_t)r->reclen - RP_LOG_HDR - RP_LOG_TRL;
    return r->reclen >= RP_LOG_HDR + 4 + RP_LOG_TRL && r->reclen <= RP_LOG_MAX_RECORD &&
           r->count >= 1 && (uint64_t)r->count * 4 <= body && r->seq + r->count - 1 >= r->seq;
}

/* The body of a record checks: its CRC, and exactly `count` entries fill it. */
static int body_check(const uint8_t *rec, const rec_t *r) {
    const uint8_t *b = rec + RP_LOG_HDR;
    size_t blen = r->reclen - RP_LOG_HDR - RP_LOG_TRL, off = 0;
    if (rp_crc32c(0, b, blen) != r->bcrc)
        return 0;
    for (uint32_t i = 0; i < r->count; i++) {
        if (off + 4 > blen)
            return 0;
        uint32_t w = rp_ld32(b + off);
        size_t e = 4 + ((w & RP_LOG_E_LABEL) ? 8 : 0) + (w & ~RP_LOG_E_LABEL);
        if ((w & ~RP_LOG_E_LABEL) > RP_LOG_MAX_PAYLOAD || off + e > blen)
            return 0;
        off += e;
    }
    return off == blen;
}

/* One body entry at e: its payload, length and label; returns its size. */
static inline size_t entry_at(const uint8_t *e, const uint8_t **payload, uint32_t *plen, uint64_t *label) {
    uint32_t w = rp_ld32(e);
    size_t h = 4;
    *label = NOLABEL;
    if (w & RP_LOG_E_LABEL) {
        *label = rp_ld64(e + 4);
        h = 12;
    }
    *plen = w & ~RP_LOG_E_LABEL;
    *payload = e + h;
    return h + *plen;
}

/* ---- a stream's run index ---------------------------------------------- */

static inline uint64_t run_last(const rp_lrun_t *r) { return r->first + r->count - 1; }

/* Index of the first run in a[lo, hi) whose last seq is >= seq (hi if none). */
static size_t first_ending_at_or_after(const rp_lrun_t *a, size_t lo, size_t hi, uint64_t seq) {
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (run_last(&a[mid]) < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* The run containing seq, or the first one after it; NULL if none. */
static rp_lrun_t *ridx_next(const rp_lridx_t *x, uint64_t seq) {
    rp_lrun_t *m = NULL, *s = NULL;
    size_t i = first_ending_at_or_after(x->main, x->head, x->n, seq);
    if (i < x->n)
        m = &x->main[i];
    size_t j = first_ending_at_or_after(x->side, 0, x->nside, seq);
    if (j < x->nside)
        s = &x->side[j];
    if (!m)
        return s;
    if (!s)
        return m;
    return s->first < m->first ? s : m;
}

static rp_lrun_t *ridx_find(const rp_lridx_t *x, uint64_t seq) {
    rp_lrun_t *r = ridx_next(x, seq);
    return r && r->first <= seq ? r : NULL;
}

/* Merge side into main. */
static int ridx_merge(rp_lridx_t *x) {
    size_t nm = x->n - x->head, total = nm + x->nside;
    rp_lrun_t *a = (rp_lrun_t *)malloc((total ? total : 1) * sizeof(rp_lrun_t));
    if (!a)
        return RP_ENOMEM;
    size_t i = x->head, j = 0, k = 0;
    while (i < x->n || j < x->nside) {
        if (j == x->nside || (i < x->n && x->main[i].first < x->side[j].first))
            a[k++] = x->main[i++];
        else
            a[k++] = x->side[j++];
    }
    free(x->main);
    x->main = a;
    x->head = 0;
    x->n = x->cap = total;
    x->nside = 0;
    return RP_OK;
}

/* Insert a run that overlaps no other.  Returns its entry or NULL. */
static rp_lrun_t *ridx_insert(rp_lridx_t *x, uint64_t first, uint32_t count, uint64_t pos) {
    rp_lrun_t r = {first, pos, count, 0};
    if (x->n == x->head || run_last(&x->main[x->n - 1]) < first) {
        if (x->n == x->cap) {
            if (x->head > x->n / 2) {          /* collected at the front: reuse the room */
                memmove(x->main, x->main + x->head, (x->n - x->head) * sizeof(rp_lrun_t));
                x->n -= x->head;
                x->head = 0;
            } else {
                size_t nc = x->cap ? x->cap * 2 : 64;
                rp_lrun_t *a = (rp_lrun_t *)realloc(x->main, nc * sizeof(rp_lrun_t));
                if (!a)
                    return NULL;
                x->main = a;
                x->cap = nc;
            }
        }
        x->main[x->n] = r;
        return &x->main[x->n++];
    }
    if (x->nside == x->sidecap) {
        size_t nc = x->sidecap ? x->sidecap * 2 : 16;
        rp_lrun_t *a = (rp_lrun_t *)realloc(x->side, nc * sizeof(rp_lrun_t));
        if (!a)
            return NULL;
        x->side = a;
        x->sidecap = nc;
    }
    size_t j = first_ending_at_or_after(x->side, 0, x->nside, first);
    memmove(x->side + j + 1, x->side + j, (x->nside - j) * sizeof(rp_lrun_t));
    x->side[j] = r;
    x->nside++;
    size_t limit = (x->n - x->head) / 8;
    if (x->nside > (limit > 256 ? limit : 256)) {
        if (ridx_merge(x))
            return NULL;
        return ridx_find(x, first);
    }
    return &x->side[j];
}

/* Drop what lies below `below`; returns the ids dropped. */
static uint64_t ridx_trim(rp_lridx_t *x, uint64_t below) {
    uint64_t dropped = 0;
    while (x->head < x->n && run_last(&x->main[x->head]) < below)
        dropped += x->main[x->head++].count;
    if (x->head < x->n && x->main[x->head].first < below) {
        rp_lrun_t *r = &x->main[x->head];
        dropped += below - r->first;
        r->count -= (uint32_t)(below - r->first);
        r->first = below;
    }
    if (x->head == x->n)
        x->head = x->n = 0;
    size_t w = 0;
    for (size_t j = 0; j < x->nside; j++) {
        rp_lrun_t r = x->side[j];
        if (run_last(&r) < below) {
            dropped += r.count;
            continue;
        }
        if (r.first < below) {
            dropped += below - r.first;
            r.count -= (uint32_t)(below - r.first);
            r.first = below;
        }
        x->side[w++] = r;
    }
    x->nside = w;
    return dropped;
}

static void ridx_free(rp_lridx_t *x) {
    free(x->main);
    free(x->side);
    memset(x, 0, sizeof(*x));
}

/* The lowest first seq indexed (valid when the stream has ids). */
static uint64_t ridx_min(const rp_lridx_t *x) {
    uint64_t m = UINT64_MAX;
    if (x->head < x->n)
        m = x->main[x->head].first;
    if (x->nside && x->side[0].first < m)
        m = x->side[0].first;
    return m;
}

/* ---- segments ---------------------------------------------------------- */

static char *seg_path(const rp_log_t *l, uint64_t no) {
    size_t n = strlen(l->dir) + 48;
    char *p = (char *)malloc(n);
    if (p)
        snprintf(p, n, "%s/seg-%020llu.rplog", l->dir, (unsigned long long)no);
    return p;
}

static int seg_add(rp_log_t *l, uint64_t no) {
    if (l->nsegs == l->segcap) {
        uint32_t nc = l->segcap ? l->segcap * 2 : 8;
        rp_lseg_t *ns = (rp_lseg_t *)realloc(l->segs, nc * sizeof(rp_lseg_t));
        if (!ns)
            return RP_ENOMEM;
        l->segs = ns;
        l->segcap = nc;
    }
    rp_lseg_t *s = &l->segs[l->nsegs++];
    memset(s, 0, sizeof(*s));
    s->no = no;
    s->fd = -1;
    return RP_OK;
}

static void seg_free(rp_lseg_t *s) {
    if (s->fd >= 0)
        close(s->fd);
    free(s->sid);
    free(s->maxseq);
    free(s->minseq);
}

static int seg_note(rp_lseg_t *s, uint32_t sid, uint64_t lo, uint64_t hi) {
    for (uint32_t i = 0; i < s->nstreams; i++) {
        if (s->sid[i] == sid) {
            if (hi > s->maxseq[i]) s->maxseq[i] = hi;
            if (lo < s->minseq[i]) s->minseq[i] = lo;
            return RP_OK;
        }
    }
    if (s->nstreams == s->scap) {
        uint32_t nc = s->scap ? s->scap * 2 : 4;
        uint32_t *a = (uint32_t *)realloc(s->sid, nc * sizeof(uint32_t));
        if (!a) return RP_ENOMEM;
        s->sid = a;
        uint64_t *b = (uint64_t *)realloc(s->maxseq, nc * sizeof(uint64_t));
        if (!b) return RP_ENOMEM;
        s->maxseq = b;
        uint64_t *c = (uint64_t *)realloc(s->minseq, nc * sizeof(uint64_t));
        if (!c) return RP_ENOMEM;
        s->minseq = c;
        s->scap = nc;
    }
    s->sid[s->nstreams] = sid;
    s->maxseq[s->nstreams] = hi;
    s->minseq[s->nstreams] = lo;
    s->nstreams++;
    return RP_OK;
}

static rp_lseg_t *seg_by_no(rp_log_t *l, uint64_t no) {
    uint32_t lo = 0, hi = l->nsegs;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (l->segs[mid].no < no)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < l->nsegs && l->segs[lo].no == no ? &l->segs[lo] : NULL;
}

static inline rp_lseg_t *cur_seg(rp_log_t *l) { return &l->segs[l->nsegs - 1]; }

/* A file descriptor to read segment s: the current one's, or one kept open
 * in the fd cache (the least recently read one is closed for it). */
static int seg_fd(rp_log_t *l, rp_lseg_t *s) {
    if (s == cur_seg(l) && !l->direct)
        return l->fd;
    if (s == cur_seg(l)) {
        if (l->rfd < 0) {
            char *path = seg_path(l, s->no);
            if (!path)
                return -1;
            l->rfd = open(path, O_RDONLY | O_CLOEXEC);
            free(path);
        }
        return l->rfd;
    }
    if (s->fd < 0) {
        uint32_t open_n = 0, victim = UINT32_MAX;
        for (uint32_t i = 0; i + 1 < l->nsegs; i++) {
            if (l->segs[i].fd < 0)
                continue;
            open_n++;
            if (victim == UINT32_MAX || l->segs[i].used < l->segs[victim].used)
                victim = i;
        }
        if (open_n >= RP_LOG_FD_CACHE && victim != UINT32_MAX) {
            close(l->segs[victim].fd);
            l->segs[victim].fd = -1;
        }
        char *path = seg_path(l, s->no);
        if (!path)
            return -1;
        s->fd = open(path, O_RDONLY | O_CLOEXEC);
        free(path);
        if (s->fd < 0)
            return -1;
    }
    s->used = ++l->fd_clock;
    return s->fd;
}

static void seg_header(uint8_t *h) {
    memcpy(h, "rplogseg", 8);
    rp_st32(h + 8, RP_LOG_VERSION);
    rp_st32(h + 12, rp_crc32c(0, h, 12));
}

static int seg_header_ok(const uint8_t *h) {
    return memcmp(h, "rplogseg", 8) == 0 && rp_ld32(h + 12) == rp_crc32c(0, h, 12);
}

/* ---- streams ----------------------------------------------------------- */

int64_t rp_log_find_stream(const rp_log_t *l, uint32_t sender, uint32_t inc) {
    uint64_t *v = rp_hmap_get(&l->sindex, ((uint64_t)sender << 32) | inc, 0);
    return v ? (int64_t)*v : -1;
}

int64_t rp_log_stream(rp_log_t *l, uint32_t sender, uint32_t inc) {
    int64_t sid = rp_log_find_stream(l, sender, inc);
    if (sid >= 0)
        return sid;
    if (l->nstreams == l->stcap) {
        uint32_t nc = l->stcap ? l->stcap * 2 : 16;
        rp_lstream_t *ns = (rp_lstream_t *)realloc(l->streams, nc * sizeof(rp_lstream_t));
        if (!ns)
            return RP_ENOMEM;
        /* the open run's entry lives in a stream's own arrays: unaffected */
        l->streams = ns;
        l->stcap = nc;
    }
    rp_lstream_t *s = &l->streams[l->nstreams];
    memset(s, 0, sizeof(*s));
    s->sender = sender;
    s->inc = inc;
    if (rp_iset_init(&s->damaged, 4, RP_LOG_DAMAGED_MAX))
        return RP_ENOMEM;
    if (rp_hmap_put(&l->sindex, ((uint64_t)sender << 32) | inc, 0, l->nstreams) < 0) {
        rp_iset_free(&s->damaged);
        return RP_ENOMEM;
    }
    return (int64_t)l->nstreams++;
}

static void stream_note(rp_lstream_t *s, uint64_t lo, uint64_t hi) {
    if (!s->count || lo < s->min_seq) s->min_seq = lo;
    if (!s->count || hi > s->max_seq) s->max_seq = hi;
    s->count += hi - lo + 1;
}

/* Damaged ids of a stream: answered as lost, never served. */
static void mark_damaged(rp_lstream_t *s, uint64_t lo, uint64_t hi) {
    rp_iset_add(&s->damaged, lo, hi);      /* at its bound the oldest knowledge stays */
}

/* Index the ids [lo, hi] of a record at pos, except those already indexed
 * (a record found twice on recovery) or below the GC frontier.  Returns
 * the ids indexed, or RP_ENOMEM. */
static int64_t index_run(rp_log_t *l, uint32_t sid, uint64_t lo, uint64_t hi, uint64_t pos) {
    rp_lstream_t *s = &l->streams[sid];
    if (lo < s->gc_below)
        lo = s->gc_below;
    int64_t added = 0;
    while (lo <= hi) {
        rp_lrun_t *r = ridx_next(&s->idx, lo);
        uint64_t end = hi;
        if (r && r->first <= lo) {            /* lo already indexed: skip past that run */
            if (run_last(r) >= hi)
                break;
            lo = run_last(r) + 1;
            continue;
        }
        if (r && r->first <= hi)
            end = r->first - 1;
        /* a run entry holds at most 2^32 - 1 ids */
        if (end - lo >= UINT32_MAX)
            end = lo + UINT32_MAX - 1;
        if (!ridx_insert(&s->idx, lo, (uint32_t)(end - lo + 1), pos))
            return RP_ENOMEM;
        stream_note(s, lo, end);
        rp_iset_remove(&s->damaged, lo, end);
        added += (int64_t)(end - lo + 1);
        if (end == hi)
            break;
        lo = end + 1;
    }
    return added;
}

/* ---- the syncer thread (group commit) ---------------------------------- */

static void run_close(rp_log_t *l);

/* One direct write of the buffer handed over (its length rounded up to a
 * block: the bytes past xlen are zeros, and the next write covers them
 * again).  Called with smu held; releases it while writing. */
static void writer_do(rp_log_t *l) {
    const uint8_t *buf = l->xbuf;
    size_t len = (l->xlen + RP_LOG_ALIGN - 1) & ~(size_t)(RP_LOG_ALIGN - 1);
    uint64_t off = l->xpos;
    int fd = l->xfd;
    pthread_mutex_unlock(&l->smu);
    int rc = 0;
    size_t done = 0;
    while (done < len) {
        ssize_t w = pwrite(fd, buf + done, len - done, (off_t)(off + done));
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0) {
            rc = w < 0 ? -errno : -EIO;
            break;
        }
        done += (size_t)w;
    }
    pthread_mutex_lock(&l->smu);
    l->n_writes++;
    if (rc && !l->xerr)
        l->xerr = rc;
    if (rc && !l->sync_err)
        l->sync_err = rc;        /* nothing after it is ever acknowledged */
    l->xbusy = 0;
    pthread_cond_broadcast(&l->scv);
}

static void *syncer_main(void *arg) {
    rp_log_t *l = (rp_log_t *)arg;
    pthread_mutex_lock(&l->smu);
    for (;;) {
        while (!l->sync_stop && !l->xbusy && l->sync_want == l->sync_done)
            pthread_cond_wait(&l->scv, &l->smu);
        if (l->xbusy) {          /* a write handed over comes before the sync that covers it */
            writer_do(l);
            continue;
        }
        if (l->sync_stop)
            break;
        uint64_t e = l->sync_want, appended = l->sync_want_appended;
        uint64_t seg = l->want_seg, off = l->want_off;
        int fd = l->fd;
        l->sync_busy = 1;
        pthread_mutex_unlock(&l->smu);
        int rc = fdatasync(fd) < 0 ? -errno : 0;
        pthread_mutex_lock(&l->smu);
        l->sync_busy = 0;
        l->n_syncs++;
        if (rc && !l->sync_err)
            l->sync_err = rc;
        if (!rc) {
            l->sync_done = e;
            l->synced = appended;
            l->sync_seg = seg;
            l->sync_off = off;
        } else {
            l->sync_done = e;          /* reported through sync_err: never acknowledged */
        }
        pthread_cond_broadcast(&l->scv);
    }
    pthread_mutex_unlock(&l->smu);
    return NULL;
}

/* Wait until the syncer is not inside fdatasync (mu held by the caller's
 * thread only through this call). */
static void syncer_quiesce(rp_log_t *l) {
    if (!l->syncer_on)
        return;
    pthread_mutex_lock(&l->smu);
    while (l->sync_busy || l->xbusy || l->sync_want != l->sync_done)
        pthread_cond_wait(&l->scv, &l->smu);
    pthread_mutex_unlock(&l->smu);
}

static int syncer_start(rp_log_t *l) {
    if (l->syncer_on)
        return RP_OK;
    if (pthread_create(&l->syncer, NULL, syncer_main, l))
        return RP_ENOMEM;
    l->syncer_on = 1;
    return RP_OK;
}

/* Direct: wait until the thread has written what was handed to it.
 * RP_OK or the first write error. */
static int writer_wait(rp_log_t *l) {
    pthread_mutex_lock(&l->smu);
    while (l->xbusy)
        pthread_cond_wait(&l->scv, &l->smu);
    int err = l->xerr;
    pthread_mutex_unlock(&l->smu);
    return err;
}

/* Direct: hand the write buffer to the log's thread and go on in the other
 * one (waiting only while the thread still writes the previous buffer).
 * The new buffer starts at the last block boundary with the partial block's
 * bytes: the next write covers that block again, whole. */
static int handoff(rp_log_t *l) {
    if (l->wlen == l->wsent)
        return RP_OK;                       /* nothing new since the last one */
    int rc = writer_wait(l);
    if (rc)
        return rc;
    if (l->xseg == cur_seg(l)->no)
        l->wdone = l->xpos + l->xlen;       /* written: the previous handoff completed */
    uint64_t end = l->wpos + l->wlen;
    uint64_t base = end & ~(uint64_t)(RP_LOG_ALIGN - 1);
    size_t pad = (size_t)(((end + RP_LOG_ALIGN - 1) & ~(uint64_t)(RP_LOG_ALIGN - 1)) - end);
    uint8_t *full = l->wbuf;
    memset(full + l->wlen, 0, pad);
    l->wbuf = l->xbuf;
    memcpy(l->wbuf, full + (base - l->wpos), (size_t)(end - base));
    pthread_mutex_lock(&l->smu);
    l->xbuf = full;
    l->xlen = l->wlen;
    l->xpos = l->wpos;
    l->xseg = cur_seg(l)->no;
    l->xfd = l->fd;
    l->xbusy = 1;
    pthread_cond_broadcast(&l->scv);
    pthread_mutex_unlock(&l->smu);
    l->wpos = base;
    l->wlen = l->wsent = (size_t)(end - base);
    l->rgen++;                              /* records moved from wbuf to xbuf */
    return RP_OK;
}

/* Direct: the segment gets no more writes (it rolls, or the log closes):
 * write what is buffered and cut the block padding off the file's end. */
static int seal(rp_log_t *l) {
    if (!l->direct)
        return RP_OK;
    int rc = rp_log_flush(l);
    if (rc)
        return rc;
    syncer_quiesce(l);
    if (ftruncate(l->fd, (off_t)(l->wpos + l->wlen)) < 0)
        return -errno;
    return RP_OK;
}

/* Make room in the write buffer: direct, hand it over; else write it. */
static int make_room(rp_log_t *l) {
    if (l->direct) {
        run_close(l);
        return handoff(l);
    }
    return rp_log_flush(l);
}

static void syncer_stop(rp_log_t *l) {
    if (!l->syncer_on)
        return;
    pthread_mutex_lock(&l->smu);
    l->sync_stop = 1;
    pthread_cond_broadcast(&l->scv);
    pthread_mutex_unlock(&l->smu);
    pthread_join(l->syncer, NULL);
    l->syncer_on = 0;
}

/* ---- write path -------------------------------------------------------- */

static void run_close(rp_log_t *l) {
    rp_lopen_t *run = &l->run;
    if (!run->open)
        return;
    uint8_t *h = l->wbuf + run->hdr;
    rp_st32(h + 8, (uint32_t)(RP_LOG_HDR + run->body + RP_LOG_TRL));
    rp_st32(h + 12, run->count);
    rp_st32(h + 32, rp_crc32c(0, h + RP_LOG_HDR, run->body));
    rp_st32(h + 36, 0);
    rp_st32(h + 4, rp_crc32c(0, h + 8, RP_LOG_HDR - 8));
    rp_st32(h, RP_LOG_MAGIC);
    uint8_t *t = l->wbuf + l->wlen;
    memcpy(t, h, RP_LOG_HDR);
    rp_st32(t, RP_LOG_TMAGIC);
    l->wlen += RP_LOG_TRL;
    rp_lseg_t *seg = cur_seg(l);
    seg->size += RP_LOG_TRL;
    l->bytes += RP_LOG_HDR + run->body + RP_LOG_TRL;
    seg_note(seg, run->sid, run->seq, run->next - 1);
    l->runs++;
    run->open = 0;
    run->entry = NULL;
}

int rp_log_flush(rp_log_t *l) {
    run_close(l);
    if (l->direct) {
        int rc = handoff(l);
        if (!rc)
            rc = writer_wait(l);
        if (!rc && l->xseg == cur_seg(l)->no) {
            /* in the file now: reads go there (and check what they read) */
            l->wdone = l->xpos + l->xlen;
            l->xseg = UINT64_MAX;
            l->rgen++;
        }
        return rc;
    }
    size_t done = 0;
    while (done < l->wlen) {
        ssize_t w = pwrite(l->fd, l->wbuf + done, l->wlen - done, (off_t)(l->wpos + done));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            /* keep what was not written: the next flush tries again */
            if (done) {
                memmove(l->wbuf, l->wbuf + done, l->wlen - done);
                l->wpos += done;
                l->wlen -= done;
            }
            return -errno;
        }
        done += (size_t)w;
    }
    l->wpos += l->wlen;
    l->wlen = 0;
    l->rgen++;
    return RP_OK;
}

int rp_log_sync(rp_log_t *l) {
    int rc = rp_log_flush(l);
    if (rc)
        return rc;
    syncer_quiesce(l);
    if (fdatasync(l->fd) < 0)
        return -errno;
    if (l->syncer_on)
        pthread_mutex_lock(&l->smu);
    l->synced = l->appended;
    l->sync_seg = cur_seg(l)->no;
    l->sync_off = l->wpos + l->wlen;
    l->sync_done = l->sync_want;     /* it covers every sync requested before it */
    if (l->syncer_on) {
        pthread_cond_broadcast(&l->scv);
        pthread_mutex_unlock(&l->smu);
    }
    return RP_OK;
}

int rp_log_sync_start(rp_log_t *l, uint64_t *epoch) {
    /* direct: the write is the thread's, ahead of this sync */
    int rc = l->direct ? make_room(l) : rp_log_flush(l);
    if (rc)
        return rc;
    rc = syncer_start(l);
    if (rc)
        return rc;
    pthread_mutex_lock(&l->smu);
    *epoch = ++l->sync_want;
    l->sync_want_appended = l->appended;
    l->want_seg = cur_seg(l)->no;
    l->want_off = l->wpos + l->wlen;
    pthread_cond_broadcast(&l->scv);
    pthread_mutex_unlock(&l->smu);
    return RP_OK;
}

uint64_t rp_log_synced_epoch(rp_log_t *l, int *err) {
    if (!l->syncer_on) {
        if (err)
            *err = 0;
        return l->sync_want;
    }
    pthread_mutex_lock(&l->smu);
    uint64_t e = l->sync_done;
    if (err)
        *err = l->sync_err;
    pthread_mutex_unlock(&l->smu);
    return e;
}

int rp_log_wait_synced(rp_log_t *l, uint64_t epoch) {
    if (!l->syncer_on)
        return RP_OK;
    pthread_mutex_lock(&l->smu);
    while (l->sync_done < epoch && !l->sync_err)
        pthread_cond_wait(&l->scv, &l->smu);
    int err = l->sync_err;
    pthread_mutex_unlock(&l->smu);
    return err;
}

static int roll(rp_log_t *l) {
    int rc = seal(l);
    if (!rc)
        rc = rp_log_sync(l);    /* the old segment is whole and durable before the next starts */
    if (rc)
        return rc;
    uint64_t no = cur_seg(l)->no + 1;
    if (seg_add(l, no))
        return RP_ENOMEM;
    char *path = seg_path(l, no);
    if (!path)
        return RP_ENOMEM;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | (l->direct ? O_DIRECT : 0), 0644);
    free(path);
    if (fd < 0) {
        l->nsegs--;
        return -errno;
    }
    /* the previous segment is read through the fd cache from now on (by a
     * buffered descriptor: a direct one reads only whole aligned blocks) */
    rp_lseg_t *prev = &l->segs[l->nsegs - 2];
    int rd = l->direct ? l->rfd : l->fd;
    if (l->direct)
        close(l->fd);
    if (prev->fd < 0)
        prev->fd = rd;
    else if (rd >= 0)
        close(rd);
    l->rfd = -1;
    if (l->syncer_on)
        pthread_mutex_lock(&l->smu);
    l->fd = fd;
    if (l->syncer_on)
        pthread_mutex_unlock(&l->smu);
    l->wpos = 0;
    seg_header(l->wbuf);
    l->wlen = RP_LOG_SEG_HDR;
    l->wsent = 0;
    l->wdone = 0;
    cur_seg(l)->size = RP_LOG_SEG_HDR;
    int dfd = open(l->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return RP_OK;
}

/* Bytes of one body entry. */
static inline size_t entry_size(uint64_t label, uint32_t plen) {
    return 4 + (label != NOLABEL ? 8 : 0) + plen;
}

static inline void put_entry(rp_log_t *l, uint64_t label, const uint8_t *payload, uint32_t plen) {
    uint8_t *e = l->wbuf + l->wlen;
    size_t n;
    if (label != NOLABEL) {
        rp_st32(e, plen | RP_LOG_E_LABEL);
        rp_st64(e + 4, label);
        n = 12;
    } else {
        rp_st32(e, plen);
        n = 4;
    }
    if (plen)
        memcpy(e + n, payload, plen);
    n += plen;
    l->wlen += n;
    l->run.body += n;
    cur_seg(l)->size += n;
}

/* Start a run of stream sid at seq with its first message. */
static int run_open(rp_log_t *l, uint32_t sid, uint64_t seq, uint64_t label, const uint8_t *payload,
                    uint32_t plen) {
    size_t need = RP_LOG_HDR + entry_size(label, plen) + RP_LOG_TRL;
    rp_lseg_t *seg = cur_seg(l);
    if (seg->size > RP_LOG_SEG_HDR && seg->size + need > l->seg_limit) {
        int rc = roll(l);
        if (rc)
            return rc;
    }
    if (l->wlen + need > l->wcap) {
        int rc = make_room(l);
        if (rc)
            return rc;
    }
    rp_lstream_t *s = &l->streams[sid];
    uint64_t pos = POS(cur_seg(l)->no, l->wpos + l->wlen);
    rp_lrun_t *e = ridx_insert(&s->idx, seq, 1, pos);
    if (!e)
        return RP_ENOMEM;
    rp_lopen_t *run = &l->run;
    run->open = 1;
    run->sid = sid;
    run->seq = seq;
    run->next = seq + 1;
    run->count = 1;
    run->hdr = l->wlen;
    run->body = 0;
    run->entry = e;
    uint8_t *h = l->wbuf + l->wlen;
    memset(h, 0, RP_LOG_HDR);
    rp_st32(h + 16, s->sender);
    rp_st32(h + 20, s->inc);
    rp_st64(h + 24, seq);
    l->wlen += RP_LOG_HDR;
    cur_seg(l)->size += RP_LOG_HDR;
    put_entry(l, label, payload, plen);
    stream_note(s, seq, seq);
    rp_iset_remove(&s->damaged, seq, seq);
    return RP_OK;
}

int rp_log_append(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq, uint64_t label,
                  int64_t t, const uint8_t *payload, uint32_t plen) {
    (void)t;
    if (plen > RP_LOG_MAX_PAYLOAD)
        return RP_EINVAL;
    rp_lopen_t *run = &l->run;
    uint32_t sid;
    if (run->open && seq == run->next && l->streams[run->sid].sender == sender &&
        l->streams[run->sid].inc == inc) {
        /* The common case: the next message of the run being written. */
        sid = run->sid;
        rp_lstream_t *s = &l->streams[sid];
        size_t e = entry_size(label, plen);
        if (run->count < UINT32_MAX && run->body + e <= RP_LOG_RUN_BYTES &&
            l->wlen + e + RP_LOG_TRL <= l->wcap && cur_seg(l)->size + e + RP_LOG_TRL <= l->seg_limit &&
            seq >= s->gc_below && (seq > s->max_seq || !ridx_find(&s->idx, seq))) {
            put_entry(l, label, payload, plen);
            run->entry->count++;
            run->count++;
            run->next++;
            if (seq > s->max_seq)
                s->max_seq = seq;
            s->count++;
            rp_iset_remove(&s->damaged, seq, seq);
            l->appended++;
            return RP_OK;
        }
    } else {
        int64_t k = rp_log_stream(l, sender, inc);
        if (k < 0)
            return (int)k;
        sid = (uint32_t)k;
    }
    rp_lstream_t *s = &l->streams[sid];
    /* Below the GC frontier the record was stable everywhere and is gone:
     * logging it again would only bring back what GC already collected. */
    if (seq < s->gc_below || (s->count && seq >= s->min_seq && seq <= s->max_seq && ridx_find(&s->idx, seq)))
        return 1;
    run_close(l);
    int rc = run_open(l, sid, seq, label, payload, plen);
    if (rc)
        return rc;
    l->appended++;
    return RP_OK;
}

/* ---- read path --------------------------------------------------------- */

/* The record at pos, whole, in memory: in the write buffer, or read ahead
 * from its segment.  *inmem: it is the write buffer's (not yet on disk: its
 * CRCs need no check; the open run's header is not final).  NULL on I/O
 * error. */
static const uint8_t *load_record(rp_log_t *l, uint64_t pos, int *inmem) {
    uint64_t segno = POS_SEG(pos), off = POS_OFF(pos);
    rp_lseg_t *cur = cur_seg(l);
    if (segno == cur->no && off >= l->wpos + l->wsent) {
        *inmem = 1;
        return l->wbuf + (off - l->wpos);
    }
    /* direct: the buffer last handed over stays readable until the next */
    if (segno == l->xseg && off >= l->xpos && off < l->xpos + l->xlen) {
        *inmem = 1;
        return l->xbuf + (off - l->xpos);
    }
    *inmem = 0;
    if (segno == l->rseg && off >= l->roff && off + RP_LOG_HDR <= l->roff + l->rlen) {
        const uint8_t *r = l->rbuf + (off - l->roff);
        uint32_t reclen = rp_ld32(r + 8);
        if (off + reclen <= l->roff + l->rlen)
            return r;
    }
    rp_lseg_t *seg = seg_by_no(l, segno);
    if (!seg)
        return NULL;
    int fd = seg_fd(l, seg);
    if (fd < 0)
        return NULL;
    /* direct: the thread may be writing beyond wdone (the block at wdone
     * again, with the same bytes up to it) */
    uint64_t end = segno != cur->no ? seg->size : l->direct ? l->wdone : l->wpos;
    if (off + RP_LOG_HDR > end)
        return NULL;
    size_t want = RP_LOG_READ_AHEAD;
    for (int pass = 0; pass < 2; pass++) {
        if (off + want > end)
            want = (size_t)(end - off);
        if (want > l->rcap) {
            uint8_t *nb = (uint8_t *)realloc(l->rbuf, want);
            if (!nb)
                return NULL;
            l->rbuf = nb;
            l->rcap = want;
        }
        l->rseg = UINT64_MAX;
        l->rgen++;
        ssize_t k = pread(fd, l->rbuf, want, (off_t)off);
        l->n_preads++;
        if (k < RP_LOG_HDR)
            return NULL;
        l->rseg = segno;
        l->roff = off;
        l->rlen = (size_t)k;
        uint32_t reclen = rp_ld32(l->rbuf + 8);
        if (reclen <= (size_t)k)
            return l->rbuf;
        if (reclen > RP_LOG_MAX_RECORD || pass)
            return l->rbuf;           /* the check will fail: damaged */
        want = reclen;                /* a record larger than the read-ahead */
    }
    return NULL;
}

/* A record read from disk checks (header and body CRCs, and it is the
 * record the index says).  Remembers the last one checked, so a run served
 * message by message is checked once. */
static int record_ok(rp_log_t *l, const uint8_t *rec, uint64_t pos, uint32_t sid, rec_t *r) {
    if (!hdr_check(rec, RP_LOG_MAGIC, r))
        return 0;
    if (r->sender != l->streams[sid].sender || r->inc != l->streams[sid].inc)
        return 0;
    if (POS_SEG(pos) == l->rseg && POS_OFF(pos) + r->reclen > l->roff + l->rlen)
        return 0;                     /* shorter than it says: cut off */
    if (l->verified == pos + 1)
        return 1;
    if (!body_check(rec, r))
        return 0;
    l->verified = pos + 1;
    return 1;
}

/* A record failed its check when read: its ids leave the index and are
 * damaged from now on (a logger answers them as lost). */
static void damaged_on_read(rp_log_t *l, uint32_t sid, rp_lrun_t *e) {
    rp_lstream_t *s = &l->streams[sid];
    uint64_t pos = e->pos;
    if (l->run.open && l->run.sid == sid)
        run_close(l);            /* entries are about to move */
    l->rd_damaged++;
    l->rgen++;
    /* every index entry pointing at this record goes */
    for (;;) {
        rp_lrun_t *r = NULL;
        rp_lridx_t *x = &s->idx;
        for (size_t i = x->head; i < x->n && !r; i++)
            if (x->main[i].pos == pos)
                r = &x->main[i];
        for (size_t j = 0; j < x->nside && !r; j++)
            if (x->side[j].pos == pos)
                r = &x->side[j];
        if (!r)
            break;
        uint64_t a = r->first, b = run_last(r);
        mark_damaged(s, a, b);
        s->count -= b - a + 1;
        /* drop the entry: mark it empty by trimming it out of the arrays */
        if (r >= x->main && r < x->main + x->n) {
            memmove(r, r + 1, (size_t)(x->main + x->n - r - 1) * sizeof(rp_lrun_t));
            x->n--;
        } else {
            memmove(r, r + 1, (size_t)(x->side + x->nside - r - 1) * sizeof(rp_lrun_t));
            x->nside--;
        }
    }
    if (s->count)
        s->min_seq = ridx_min(&s->idx);
}

/* Position c inside the record of index entry e at seq (>= e->first).
 * Returns 0, RP_LOG_IOERR or RP_LOG_DAMAGED. */
static int cursor_load(rp_log_t *l, rp_log_cursor_t *c, rp_lrun_t *e, uint64_t seq) {
    int inmem;
    const uint8_t *rec = load_record(l, e->pos, &inmem);
    if (!rec)
        return RP_LOG_IOERR;
    uint64_t rseq;
    uint32_t count;
    if (inmem) {
        rseq = rp_ld64(rec + 24);
        count = (l->run.open && rec == l->wbuf + l->run.hdr) ? l->run.count : rp_ld32(rec + 12);
    } else {
        rec_t r;
        if (!record_ok(l, rec, e->pos, c->sid, &r)) {
            damaged_on_read(l, c->sid, e);
            return RP_LOG_DAMAGED;
        }
        rseq = r.seq;
        count = r.count;
    }
    if (seq < rseq || seq - rseq >= count) {     /* the index and the record disagree */
        if (!inmem)
            damaged_on_read(l, c->sid, e);
        return RP_LOG_DAMAGED;
    }
    size_t off = RP_LOG_HDR;
    uint64_t q = rseq;
    /* Entries are self-sized: walk to seq, from where the last load in this
     * record stopped -- serving a run id by id walked it from its start
     * for every id (quadratic in the run's length). */
    if (l->walk_off && l->walk_gen == l->rgen && l->walk_pos == e->pos && l->walk_seq >= rseq &&
        l->walk_seq <= seq) {
        q = l->walk_seq;
        off = l->walk_off;
    }
    for (; q < seq; q++) {
        uint32_t w = rp_ld32(rec + off);
        off += 4 + ((w & RP_LOG_E_LABEL) ? 8 : 0) + (w & ~RP_LOG_E_LABEL);
    }
    l->walk_pos = e->pos;
    l->walk_gen = l->rgen;
    l->walk_seq = seq;
    l->walk_off = off;
    c->rec = rec;
    c->gen = l->rgen;
    c->rseq = seq;
    c->rleft = (uint32_t)(count - (seq - rseq));
    c->eoff = off;
    c->elast = run_last(e);
    return RP_OK;
}

int rp_log_seek(rp_log_t *l, rp_log_cursor_t *c, uint32_t sender, uint32_t inc, uint64_t seq) {
    memset(c, 0, sizeof(*c));
    int64_t sid = rp_log_find_stream(l, sender, inc);
    if (sid < 0)
        return RP_LOG_ABSENT;
    c->sid = (uint32_t)sid;
    c->seq = seq;
    return RP_OK;
}

long rp_log_next(rp_log_t *l, rp_log_cursor_t *c, uint64_t hi, uint64_t *seq, const uint8_t **payload,
                 uint64_t *label) {
    rp_lstream_t *s = &l->streams[c->sid];
    if (c->done || c->seq > hi)
        return RP_LOG_ABSENT;
    if (!c->rec || !c->rleft || c->seq != c->rseq || c->seq > c->elast || c->gen != l->rgen) {
        if (c->seq < s->gc_below)
            c->seq = s->gc_below;
        rp_lrun_t *e = ridx_next(&s->idx, c->seq);
        if (!e || e->first > hi)
            return RP_LOG_ABSENT;
        uint64_t at = e->first > c->seq ? e->first : c->seq;
        int rc = cursor_load(l, c, e, at);
        if (rc) {
            c->rec = NULL;
            return rc;
        }
        c->seq = at;
    }
    uint32_t plen;
    size_t n = entry_at(c->rec + c->eoff, payload, &plen, label);
    *seq = c->seq;
    c->eoff += n;
    c->rleft--;
    c->rseq++;
    if (c->seq == UINT64_MAX)
        c->done = 1;
    else
        c->seq++;
    return (long)plen;
}

long rp_log_read(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq, const uint8_t **payload,
                 uint64_t *label) {
    int64_t sid = rp_log_find_stream(l, sender, inc);
    if (sid < 0)
        return RP_LOG_ABSENT;
    rp_lstream_t *s = &l->streams[sid];
    if (seq < s->gc_below)
        return RP_LOG_ABSENT;
    rp_lrun_t *e = ridx_find(&s->idx, seq);
    if (!e)
        return RP_LOG_ABSENT;
    rp_log_cursor_t c = {.sid = (uint32_t)sid, .seq = seq};
    int rc = cursor_load(l, &c, e, seq);
    if (rc)
        return rc;
    uint32_t plen;
    uint64_t lab;
    entry_at(c.rec + c.eoff, payload, &plen, &lab);
    if (label)
        *label = lab;
    return (long)plen;
}

int rp_log_has(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq) {
    int64_t sid = rp_log_find_stream(l, sender, inc);
    if (sid < 0)
        return 0;
    rp_lstream_t *s = &l->streams[sid];
    return seq >= s->gc_below && s->count && seq >= s->min_seq && seq <= s->max_seq &&
           ridx_find(&s->idx, seq) != NULL;
}

int rp_log_durable(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq) {
    int64_t sid = rp_log_find_stream(l, sender, inc);
    if (sid < 0)
        return 0;
    rp_lstream_t *s = &l->streams[sid];
    rp_lrun_t *e = seq >= s->gc_below ? ridx_find(&s->idx, seq) : NULL;
    if (!e)
        return 0;
    if (l->syncer_on)
        pthread_mutex_lock(&l->smu);
    uint64_t sseg = l->sync_seg, soff = l->sync_off;
    if (l->syncer_on)
        pthread_mutex_unlock(&l->smu);
    uint64_t seg = POS_SEG(e->pos);
    /* a record in an older segment was synced when its segment rolled */
    if (seg < sseg)
        return 1;
    if (seg > sseg)
        return 0;
    /* the open run's record is not on disk; a closed one ends with its trailer */
    if (l->run.open && e->pos == POS(cur_seg(l)->no, l->wpos + l->run.hdr))
        return 0;
    int inmem;
    const uint8_t *rec = load_record(l, e->pos, &inmem);
    return rec && POS_OFF(e->pos) + rp_ld32(rec + 8) <= soff;
}

int64_t rp_log_cover(const rp_log_t *l, uint32_t sid, uint64_t lo, uint64_t hi, rp_iset_t *out) {
    const rp_lstream_t *s = &l->streams[sid];
    if (lo < s->gc_below)
        lo = s->gc_below;
    int64_t added = 0;
    while (lo <= hi) {
        const rp_lrun_t *e = ridx_next(&s->idx, lo);
        if (!e || e->first > hi)
            break;
        uint64_t a = e->first > lo ? e->first : lo;
        uint64_t b = run_last(e) < hi ? run_last(e) : hi;
        int64_t r = rp_iset_add(out, a, b);
        if (r < 0)
            return r;
        added += r;
        if (b == hi)
            break;
        lo = b + 1;
    }
    return added;
}

void rp_log_intervals(const rp_log_t *l, uint32_t sid, void (*fn)(void *, uint64_t, uint64_t), void *arg) {
    const rp_lridx_t *x = &l->streams[sid].idx;
    size_t i = x->head, j = 0;
    int have = 0;
    uint64_t a = 0, b = 0;
    while (i < x->n || j < x->nside) {
        const rp_lrun_t *r;
        if (j == x->nside || (i < x->n && x->main[i].first < x->side[j].first))
            r = &x->main[i++];
        else
            r = &x->side[j++];
        if (have && r->first == b + 1) {
            b = run_last(r);
            continue;
        }
        if (have)
            fn(arg, a, b);
        a = r->first;
        b = run_last(r);
        have = 1;
    }
    if (have)
        fn(arg, a, b);
}

/* ---- recovery ---------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* A record found whole at m + pos (header or trailer vouching for r). */
static int take_record(rp_log_t *l, rp_lseg_t *seg, uint64_t pos, const rec_t *r) {
    int64_t sid = rp_log_stream(l, r->sender, r->inc);
    if (sid < 0)
        return (int)sid;
    int64_t k = index_run(l, (uint32_t)sid, r->seq, r->seq + r->count - 1, POS(seg->no, pos));
    if (k < 0)
        return (int)k;
    seg_note(seg, (uint32_t)sid, r->seq, r->seq + r->count - 1);
    l->rec_records += (uint64_t)k;
    l->rec_runs++;
    return RP_OK;
}

/* A record whose body failed its check: its ids are damaged (unless the
 * same ids are indexed from another record). */
static int take_damaged(rp_log_t *l, const rec_t *r) {
    int64_t sid = rp_log_stream(l, r->sender, r->inc);
    if (sid < 0)
        return (int)sid;
    rp_lstream_t *s = &l->streams[sid];
    uint64_t lo = r->seq, hi = r->seq + r->count - 1;
    l->rec_damaged_records++;
    l->rec_damaged_ids += r->count;
    while (lo <= hi) {                     /* only the ids no other record holds */
        rp_lrun_t *e = ridx_next(&s->idx, lo);
        if (!e || e->first > hi) {
            mark_damaged(s, lo, hi);
            break;
        }
        if (e->first > lo)
            mark_damaged(s, lo, e->first - 1);
        if (run_last(e) >= hi)
            break;
        lo = run_last(e) + 1;
    }
    return RP_OK;
}

/* The next position >= from where a record header checks, or size. */
static uint64_t resync(const uint8_t *m, uint64_t from, uint64_t size) {
    uint8_t magic[4];
    rp_st32(magic, RP_LOG_MAGIC);
    uint64_t p = from;
    while (p + RP_LOG_HDR <= size) {
        const uint8_t *q = (const uint8_t *)memmem(m + p, size - p, magic, 4);
        if (!q)
            break;
        p = (uint64_t)(q - m);
        rec_t r;
        if (p + RP_LOG_HDR <= size && hdr_check(q, RP_LOG_MAGIC, &r))
            return p;
        p++;
    }
    return size;
}

/* Rewrite one copy of a record's header from the other (magic given),
 * so that reads, which go by the header, find it whole again. */
static void rewrite_copy(int fd, const uint8_t *good, uint32_t magic, uint64_t at) {
    uint8_t h[RP_LOG_HDR];
    memcpy(h, good, RP_LOG_HDR);
    rp_st32(h, magic);
    if (pwrite(fd, h, RP_LOG_HDR, (off_t)at) != RP_LOG_HDR)
        return;                 /* then a read finds it damaged, loudly */
}

/* Bytes [from, to) did not start with a good header.  If they end with a
 * good trailer naming a record of exactly that length, it is that record
 * with its header hit: recovered if the body checks (the header rewritten
 * from the trailer), damaged otherwise.  Else they name no record.
 * Returns RP_OK, or an error. */
static int take_span(rp_log_t *l, rp_lseg_t *seg, int fd, const uint8_t *m, uint64_t from, uint64_t to) {
    rec_t r;
    if (to - from >= RP_LOG_HDR + 4 + RP_LOG_TRL && hdr_check(m + to - RP_LOG_TRL, RP_LOG_TMAGIC, &r) &&
        r.reclen == to - from) {
        if (body_check(m + from, &r)) {
            l->rec_repaired++;
            rewrite_copy(fd, m + to - RP_LOG_TRL, RP_LOG_MAGIC, from);
            return take_record(l, seg, from, &r);
        }
        return take_damaged(l, &r);
    }
    l->rec_damaged_bytes += to - from;
    return RP_OK;
}

/* Scan one v1 segment (its header checked): index its records, report
 * damage; the newest segment's torn tail is cut off.  RP_OK or an error. */
static int scan_v1(rp_log_t *l, rp_lseg_t *seg, int fd, const uint8_t *m, uint64_t size, int is_last) {
    uint64_t pos = RP_LOG_SEG_HDR;
    int rc = RP_OK;
    while (pos < size && rc == RP_OK) {
        rec_t r;
        if (pos + RP_LOG_HDR <= size && hdr_check(m + pos, RP_LOG_MAGIC, &r)) {
            if (r.reclen > size - pos) {
                /* runs past the end: an interrupted write, or damage after it */
                uint64_t next = resync(m, pos + 1, size);
                if (next == size && is_last)
                    break;                                  /* torn tail */
                rc = take_damaged(l, &r);                   /* incomplete: its ids are damaged */
                pos = next;
                continue;
            }
            const uint8_t *rec = m + pos;
            if (body_check(rec, &r)) {
                rec_t t;
                if (!hdr_check(rec + r.reclen - RP_LOG_TRL, RP_LOG_TMAGIC, &t)) {
                    l->rec_repaired++;                      /* the trailer was hit */
                    rewrite_copy(fd, rec, RP_LOG_TMAGIC, pos + r.reclen - RP_LOG_TRL);
                }
                rc = take_record(l, seg, pos, &r);
            } else {
                rc = take_damaged(l, &r);
            }
            pos += r.reclen;
            continue;
        }
        uint64_t next = resync(m, pos + 1, size);
        if (next == size && is_last) {
            /* Nothing whole follows.  A record whose header was hit and
             * whose trailer is intact still ends the file; anything else
             * is the tail of an interrupted write. */
            rec_t t;
            if (size - pos >= RP_LOG_HDR + 4 + RP_LOG_TRL &&
                hdr_check(m + size - RP_LOG_TRL, RP_LOG_TMAGIC, &t) && t.reclen == size - pos) {
                rc = take_span(l, seg, fd, m, pos, size);
                pos = size;
            }
            break;
        }
        rc = take_span(l, seg, fd, m, pos, next);
        pos = next;
    }
    if (rc)
        return rc;
    if (pos < size) {
        /* zeros short of a block after the last record are a direct
         * write's padding (a log not closed), not a torn write */
        int padding = size - pos < RP_LOG_ALIGN;
        for (uint64_t i = pos; padding && i < size; i++)
            padding = !m[i];
        if (ftruncate(fd, (off_t)pos) == 0 && !padding)
            l->rec_truncated_bytes += size - pos;
        size = pos;
    }
    seg->size = size;
    return RP_OK;
}

/* The old format's record checks at m (its CRC covers all but itself). */
static int v0_record(const uint8_t *m, uint64_t left) {
    if (left < RP_LOG_V0_HDR)
        return 0;
    uint32_t reclen = rp_ld32(m + 4), plen = rp_ld32(m + 44);
    return reclen == RP_LOG_V0_HDR + plen && plen <= RP_LOG_MAX_PAYLOAD && reclen <= left &&
           rp_crc32c(0, m + 4, reclen - 4) == rp_ld32(m);
}

/* Convert one segment of the old format (v0: a 48-byte header and a CRC
 * per message) into the log: every record that checks is appended (as
 * runs).  After a bad record the scan finds the next one that checks; the
 * bytes between are counted as damaged, except an incomplete end of the
 * newest file (a torn tail).  RP_OK or an error. */
static int convert_v0(rp_log_t *l, const uint8_t *m, uint64_t size, int is_last) {
    uint64_t pos = 0;
    while (pos < size) {
        const uint8_t *r = m + pos;
        if (v0_record(r, size - pos)) {
            uint32_t plen = rp_ld32(r + 44);
            int rc = rp_log_append(l, rp_ld32(r + 8), rp_ld32(r + 12), rp_ld64(r + 16), rp_ld64(r + 24),
                                   (int64_t)rp_ld64(r + 32), r + RP_LOG_V0_HDR, plen);
            if (rc < 0)
                return rc;
            if (rc == 0)
                l->rec_converted++;
            pos += RP_LOG_V0_HDR + plen;
            continue;
        }
        uint64_t next = pos + 1;
        while (next < size && !v0_record(m + next, size - next))
            next++;
        if (next >= size && is_last) {
            l->rec_truncated_bytes += size - pos;
            break;
        }
        l->rec_bad++;
        l->rec_damaged_bytes += next - pos;
        pos = next;
    }
    return RP_OK;
}

/* The segment numbers of the segment files in dir, sorted, into *out (the
 * caller frees it).  Returns how many, or a negative error. */
static int64_t list_segments(const char *dir, uint64_t **out) {
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    uint64_t *nos = NULL;
    size_t nn = 0, nc = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        unsigned long long no;
        char tail[8];
        if (sscanf(de->d_name, "seg-%20llu.%7s", &no, tail) != 2 || strcmp(tail, "rplog") != 0)
            continue;
        if (nn == nc) {
            nc = nc ? nc * 2 : 16;
            uint64_t *t = (uint64_t *)realloc(nos, nc * sizeof(uint64_t));
            if (!t) {
                free(nos);
                closedir(d);
                return RP_ENOMEM;
            }
            nos = t;
        }
        nos[nn++] = no;
    }
    closedir(d);
    if (nn)
        qsort(nos, nn, sizeof(uint64_t), cmp_u64);
    *out = nos;
    return (int64_t)nn;
}

/* A segment file mapped for the recovery scan. */
typedef struct {
    int fd;
    uint8_t *m;
    uint64_t size;
} mapped_t;

static int map_segment(rp_log_t *l, uint64_t no, mapped_t *f) {
    memset(f, 0, sizeof(*f));
    char *path = seg_path(l, no);
    if (!path)
        return RP_ENOMEM;
    f->fd = open(path, O_RDWR | O_CLOEXEC);
    free(path);
    if (f->fd < 0)
        return -errno;
    struct stat st;
    if (fstat(f->fd, &st) < 0) {
        int e = -errno;
        close(f->fd);
        return e;
    }
    f->size = (uint64_t)st.st_size;
    if (f->size) {
        f->m = (uint8_t *)mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
        if (f->m == MAP_FAILED) {
            int e = -errno;
            close(f->fd);
            return e;
        }
    }
    return RP_OK;
}

static void unmap_segment(mapped_t *f) {
    if (f->m)
        munmap(f->m, f->size);
    if (f->fd >= 0)
        close(f->fd);
}

static int open_tail(rp_log_t *l, int fresh);

enum { SEG_V1, SEG_V0, SEG_EMPTY };

/* What a segment file is: v1 (its header checks, or a v1 record follows a
 * damaged header), v0 (an old-format record at its start), or empty.  A
 * file that is neither is scanned as v1: its bytes are reported, never
 * thrown away. */
static int classify(rp_log_t *l, const mapped_t *f) {
    if (f->size >= RP_LOG_SEG_HDR && seg_header_ok(f->m))
        return SEG_V1;
    if (f->size == 0)
        return SEG_EMPTY;
    if (v0_record(f->m, f->size))
        return SEG_V0;
    if (f->size >= RP_LOG_SEG_HDR && resync(f->m, 0, f->size) < f->size) {
        uint8_t h[RP_LOG_SEG_HDR];                  /* the segment header was hit: */
        seg_header(h);                              /* it holds nothing else, rewrite it */
        if (pwrite(f->fd, h, RP_LOG_SEG_HDR, 0) == RP_LOG_SEG_HDR)
            l->rec_repaired++;
        else
            l->rec_damaged_bytes += RP_LOG_SEG_HDR;
        return SEG_V1;
    }
    for (uint64_t p = 1; p + RP_LOG_V0_HDR <= f->size; p++)
        if (v0_record(f->m + p, f->size - p))
            return SEG_V0;                          /* an old segment whose start was hit */
    return SEG_V1;
}

/* Rebuild the index from the segments found: v1 segments are scanned in
 * place; old-format (v0) ones are converted into a new v1 segment, which is
 * synced before they are removed.  RP_OK or a negative error. */
static int recover(rp_log_t *l, const uint64_t *nos, size_t nn) {
    uint64_t *old = (uint64_t *)malloc((nn ? nn : 1) * sizeof(uint64_t));
    if (!old)
        return RP_ENOMEM;
    size_t nold = 0;
    int rc = RP_OK;
    uint64_t newest = nn ? nos[nn - 1] : 0;
    for (size_t i = 0; i < nn && rc == RP_OK; i++) {
        mapped_t f;
        rc = map_segment(l, nos[i], &f);
        if (rc)
            break;
        int kind = classify(l, &f);
        if (kind == SEG_V0) {
            old[nold++] = nos[i];
        } else if (kind == SEG_EMPTY) {
            /* a roll interrupted before the new segment's header: reuse
             * it if it is the newest, else it holds nothing */
            if (i + 1 == nn && (rc = seg_add(l, nos[i])) == RP_OK)
                cur_seg(l)->size = 0;
            else if (i + 1 < nn)
                old[nold++] = nos[i];
        } else if ((rc = seg_add(l, nos[i])) == RP_OK) {
            rc = scan_v1(l, cur_seg(l), f.fd, f.m, f.size, i + 1 == nn);
        }
        unmap_segment(&f);
    }
    if (rc == RP_OK) {
        /* the tail: the newest v1 segment, or a new one after everything */
        int fresh = !l->nsegs || l->segs[l->nsegs - 1].no != newest;
        if (fresh && seg_add(l, nn ? newest + 1 : 0))
            rc = RP_ENOMEM;
        else
            rc = open_tail(l, fresh || cur_seg(l)->size < RP_LOG_SEG_HDR);
    }
    for (size_t i = 0; i < nold && rc == RP_OK; i++) {
        mapped_t f;
        rc = map_segment(l, old[i], &f);
        if (rc)
            break;
        rc = convert_v0(l, f.m, f.size, old[i] == newest);
        unmap_segment(&f);
    }
    if (rc == RP_OK && nold) {
        rc = rp_log_sync(l);
        for (size_t i = 0; i < nold && rc == RP_OK; i++) {
            char *path = seg_path(l, old[i]);
            if (path) {
                unlink(path);
                free(path);
            }
        }
    }
    free(old);
    return rc;
}

/* Open the last segment for appending (writing its header if it is new),
 * and make its directory entry durable.  RP_OK or a negative error. */
static int open_tail(rp_log_t *l, int fresh) {
    rp_lseg_t *seg = cur_seg(l);
    char *path = seg_path(l, seg->no);
    if (!path)
        return RP_ENOMEM;
    int flags = O_RDWR | O_CREAT | O_CLOEXEC | (fresh ? O_TRUNC : 0);
    /* Direct writes where the file system takes them (not tmpfs, say). */
    l->fd = l->want_direct ? open(path, flags | O_DIRECT, 0644) : -1;
    if (l->fd >= 0)
        l->direct = 1;
    else if (!l->want_direct || errno == EINVAL)
        l->fd = open(path, flags, 0644);
    free(path);
    if (l->fd < 0)
        return -errno;
    if (l->direct) {
        int rc = syncer_start(l);
        if (rc)
            return rc;
    }
    if (fresh) {
        seg_header(l->wbuf);
        l->wlen = RP_LOG_SEG_HDR;
        l->wpos = 0;
        l->wsent = 0;
        l->wdone = 0;
        seg->size = RP_LOG_SEG_HDR;
    } else if (l->direct) {
        /* the buffer starts at the last block boundary, with that block's bytes */
        l->wpos = seg->size & ~(uint64_t)(RP_LOG_ALIGN - 1);
        l->wlen = l->wsent = (size_t)(seg->size - l->wpos);
        l->wdone = seg->size;
        int rfd = l->wlen ? seg_fd(l, seg) : -1;
        if (l->wlen && (rfd < 0 || pread(rfd, l->wbuf, l->wlen, (off_t)l->wpos) != (ssize_t)l->wlen))
            return rfd < 0 ? -errno : RP_EIO;
    } else {
        l->wpos = seg->size;
    }
    /* What the previous process wrote may still be only in the page cache:
     * make it durable before anything is acknowledged from it. */
    int rc = rp_log_flush(l);
    if (rc)
        return rc;
    if (fdatasync(l->fd) < 0)
        return -errno;
    int dfd = open(l->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    l->sync_seg = seg->no;
    l->sync_off = l->wpos + l->wlen;
    return RP_OK;
}

int rp_log_open(rp_log_t *l, const char *dir, uint64_t seg_limit) {
    return rp_log_open_mode(l, dir, seg_limit, 1);
}

int rp_log_open_mode(rp_log_t *l, const char *dir, uint64_t seg_limit, int direct) {
    memset(l, 0, sizeof(*l));
    l->want_direct = direct;
    l->fd = -1;
    l->rfd = -1;
    l->xfd = -1;
    l->xseg = UINT64_MAX;
    l->owner = (int)getpid();
    l->seg_limit = seg_limit ? seg_limit : (64u << 20);
    if (l->seg_limit < RP_LOG_SEG_HDR + 2 * RP_LOG_HDR + 16)
        l->seg_limit = RP_LOG_SEG_HDR + 2 * RP_LOG_HDR + 16;
    l->dir = strdup(dir);
    l->wcap = RP_LOG_MAX_RECORD + RP_LOG_WBUF;
    /* two block-aligned buffers (direct writes), room for a block's padding */
    void *wb = NULL, *xb = NULL;
    if (posix_memalign(&wb, RP_LOG_ALIGN, l->wcap + RP_LOG_ALIGN))
        wb = NULL;
    if (posix_memalign(&xb, RP_LOG_ALIGN, l->wcap + RP_LOG_ALIGN))
        xb = NULL;
    l->wbuf = (uint8_t *)wb;
    l->xbuf = (uint8_t *)xb;
    l->rcap = RP_LOG_READ_AHEAD;
    l->rbuf = (uint8_t *)malloc(l->rcap);
    l->rseg = UINT64_MAX;
    pthread_mutex_init(&l->smu, NULL);
    pthread_cond_init(&l->scv, NULL);
    if (!l->dir || !l->wbuf || !l->xbuf || !l->rbuf || rp_hmap_init(&l->sindex, 64, 0)) {
        rp_log_close(l);
        return RP_ENOMEM;
    }
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        int e = -errno;
        rp_log_close(l);
        return e;
    }
    uint64_t *nos = NULL;
    int64_t nn = list_segments(dir, &nos);
    int rc = nn < 0 ? (int)nn : recover(l, nos, (size_t)nn);
    free(nos);
    if (rc != RP_OK) {
        rp_log_close(l);
        return rc;
    }
    l->appended = l->synced = l->rec_records + l->rec_converted;
    return RP_OK;
}

/* A copy inherited by a forked child (a test's or a tool's worker) must
 * not write the parent's buffer into the parent's files, and has no sync
 * thread: waiting for it, or destroying a condition it waits on, would
 * hang the child forever.  It only closes its descriptors and frees. */
static int forked_copy(const rp_log_t *l) {
    return l->owner && l->owner != (int)getpid();
}

static void release(rp_log_t *l) {
    int forked = forked_copy(l);
    if (!forked)
        syncer_stop(l);
    if (l->fd >= 0)
        close(l->fd);
    if (l->rfd >= 0)
        close(l->rfd);
    for (uint32_t i = 0; i < l->nsegs; i++)
        seg_free(&l->segs[i]);
    free(l->segs);
    for (uint32_t i = 0; i < l->nstreams; i++) {
        ridx_free(&l->streams[i].idx);
        rp_iset_free(&l->streams[i].damaged);
    }
    free(l->streams);
    free(l->wbuf);
    free(l->xbuf);
    free(l->rbuf);
    free(l->dir);
    if (l->sindex.b)
        rp_hmap_free(&l->sindex);
    if (!forked) {
        pthread_mutex_destroy(&l->smu);
        pthread_cond_destroy(&l->scv);
    }
    memset(l, 0, sizeof(*l));
    l->fd = -1;
    l->rfd = -1;
}

void rp_log_close(rp_log_t *l) {
    if (forked_copy(l)) {
        rp_log_abandon(l);
        return;
    }
    if (l->fd >= 0 && seal(l) == RP_OK)
        rp_log_sync(l);
    release(l);
}

void rp_log_abandon(rp_log_t *l) {
    /* the user-space write buffer (with the open run) dies with the process */
    l->run.open = 0;
    l->wlen = 0;
    release(l);
}

/* ---- GC ---------------------------------------------------------------- */

int64_t rp_log_gc(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t below) {
    /* A frontier for a stream not seen yet still counts: its records below
     * it are stable and must not be logged later. */
    int64_t sid = rp_log_stream(l, sender, inc);
    if (sid < 0)
        return sid;
    rp_lstream_t *s = &l->streams[sid];
    if (below <= s->gc_below)
        return 0;
    if (l->run.open && l->run.sid == (uint32_t)sid)
        run_close(l);            /* its index entry may be trimmed */
    uint64_t dropped = ridx_trim(&s->idx, below);
    l->rgen++;
    s->count -= dropped;
    if (s->count)
        s->min_seq = ridx_min(&s->idx);
    s->gc_below = below;
    rp_iset_remove(&s->damaged, 0, below - 1);
    rp_log_gc_segments(l);
    return (int64_t)dropped;
}

int rp_log_gc_segments(rp_log_t *l) {
    int deleted = 0;
    uint32_t w = 0;
    for (uint32_t i = 0; i < l->nsegs; i++) {
        rp_lseg_t *s = &l->segs[i];
        int keep = (i + 1 == l->nsegs);
        for (uint32_t k = 0; !keep && k < s->nstreams; k++)
            if (s->maxseq[k] >= l->streams[s->sid[k]].gc_below)
                keep = 1;
        if (keep) {
            l->segs[w++] = *s;
            continue;
        }
        char *path = seg_path(l, s->no);
        if (path) {
            unlink(path);
            free(path);
        }
        if (l->rseg == s->no)
            l->rseg = UINT64_MAX;
        seg_free(s);
        deleted++;
    }
    l->nsegs = w;
    return deleted;
}
