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

/* ---- CRC32C (Castagnoli), slicing-by-8 --------------------------------- */

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
/* The SSE4.2 crc32 instruction computes CRC32C: ~8 bytes per instruction.
 * Compiled for that target only here, and used only when the CPU has it, so
 * the build stays portable. */
__attribute__((target("sse4.2")))
static uint32_t crc32c_hw(uint32_t crc, const void *data, size_t len) {
    const uint8_t *p = (const uint8_t *)data;
    uint64_t c = ~crc;
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
    if (hw_crc < 0) {
        __builtin_cpu_init();
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

/* ---- helpers ----------------------------------------------------------- */

#define POS(seg, off) (((uint64_t)(seg) << 40) | (uint64_t)(off))
#define POS_SEG(p) ((p) >> 40)
#define POS_OFF(p) ((p) & (((uint64_t)1 << 40) - 1))

/* ---- per-stream index ------------------------------------------------- */

static uint64_t lp_get(const rp_lpidx_t *x, uint64_t seq) {
    uint64_t pg = seq >> RP_LPAGE_BITS;
    if (pg < x->first_page || pg - x->first_page >= x->npages)
        return 0;
    const uint64_t *p = x->pages[pg - x->first_page];
    return p ? p[seq & (RP_LPAGE - 1)] : 0;
}

/* Set seq's entry (v = position + 1, or 0 to clear).  Returns 0 or RP_ENOMEM. */
static int lp_set(rp_lpidx_t *x, uint64_t seq, uint64_t v) {
    uint64_t pg = seq >> RP_LPAGE_BITS;
    if (!x->npages) {
        if (!v)
            return RP_OK;
        x->first_page = pg;
    }
    if (pg < x->first_page) {
        if (!v)
            return RP_OK;
        /* grow downwards */
        uint64_t add = x->first_page - pg, n = x->npages + add;
        uint64_t **np = (uint64_t **)calloc(n, sizeof(uint64_t *));
        uint32_t *nf = (uint32_t *)calloc(n, sizeof(uint32_t));
        if (!np || !nf) {
            free(np);
            free(nf);
            return RP_ENOMEM;
        }
        if (x->npages) {
            memcpy(np + add, x->pages, x->npages * sizeof(uint64_t *));
            memcpy(nf + add, x->fill, x->npages * sizeof(uint32_t));
        }
        free(x->pages);
        free(x->fill);
        x->pages = np;
        x->fill = nf;
        x->npages = n;
        x->first_page = pg;
    } else if (pg - x->first_page >= x->npages) {
        if (!v)
            return RP_OK;
        uint64_t n = pg - x->first_page + 1;
        uint64_t cap = x->npages ? x->npages : 1;
        while (cap < n)
            cap *= 2;
        uint64_t **np = (uint64_t **)realloc(x->pages, cap * sizeof(uint64_t *));
        if (!np)
            return RP_ENOMEM;
        x->pages = np;
        uint32_t *nf = (uint32_t *)realloc(x->fill, cap * sizeof(uint32_t));
        if (!nf)
            return RP_ENOMEM;
        x->fill = nf;
        memset(x->pages + x->npages, 0, (cap - x->npages) * sizeof(uint64_t *));
        memset(x->fill + x->npages, 0, (cap - x->npages) * sizeof(uint32_t));
        x->npages = cap;
    }
    uint64_t k = pg - x->first_page;
    if (!x->pages[k]) {
        if (!v)
            return RP_OK;
        x->pages[k] = (uint64_t *)calloc(RP_LPAGE, sizeof(uint64_t));
        if (!x->pages[k])
            return RP_ENOMEM;
    }
    uint64_t *e = &x->pages[k][seq & (RP_LPAGE - 1)];
    if (!*e && v)
        x->fill[k]++;
    else if (*e && !v)
        x->fill[k]--;
    *e = v;
    if (!x->fill[k]) {          /* an empty page goes back */
        free(x->pages[k]);
        x->pages[k] = NULL;
    }
    return RP_OK;
}

static void lp_free(rp_lpidx_t *x) {
    for (uint64_t k = 0; k < x->npages; k++)
        free(x->pages[k]);
    free(x->pages);
    free(x->fill);
    memset(x, 0, sizeof(*x));
}

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
    return RP_OK;
}

static void seg_free(rp_lseg_t *s) {
    free(s->sid);
    free(s->maxseq);
    free(s->minseq);
}

static int seg_note(rp_lseg_t *s, uint32_t sid, uint64_t seq) {
    for (uint32_t i = 0; i < s->nstreams; i++) {
        if (s->sid[i] == sid) {
            if (seq > s->maxseq[i]) s->maxseq[i] = seq;
            if (seq < s->minseq[i]) s->minseq[i] = seq;
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
    s->maxseq[s->nstreams] = seq;
    s->minseq[s->nstreams] = seq;
    s->nstreams++;
    return RP_OK;
}

int64_t rp_log_stream(rp_log_t *l, uint32_t sender, uint32_t inc) {
    uint64_t key = ((uint64_t)sender << 32) | inc;
    uint64_t *v = rp_hmap_get(&l->sindex, key, 0);
    if (v)
        return (int64_t)*v;
    if (l->nstreams == l->stcap) {
        uint32_t nc = l->stcap ? l->stcap * 2 : 16;
        rp_lstream_t *ns = (rp_lstream_t *)realloc(l->streams, nc * sizeof(rp_lstream_t));
        if (!ns)
            return RP_ENOMEM;
        l->streams = ns;
        l->stcap = nc;
    }
    rp_lstream_t *s = &l->streams[l->nstreams];
    memset(s, 0, sizeof(*s));
    s->sender = sender;
    s->inc = inc;
    if (rp_hmap_put(&l->sindex, key, 0, l->nstreams) < 0)
        return RP_ENOMEM;
    return (int64_t)l->nstreams++;
}

static void stream_note(rp_lstream_t *s, uint64_t seq) {
    if (!s->count || seq < s->min_seq) s->min_seq = seq;
    if (!s->count || seq > s->max_seq) s->max_seq = seq;
    s->count++;
}

/* ---- recovery ---------------------------------------------------------- */

static int cmp_u64(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Scan one segment; returns the length of its valid prefix. */
static int64_t scan_segment(rp_log_t *l, uint32_t si, int is_last) {
    rp_lseg_t *seg = &l->segs[si];
    char *path = seg_path(l, seg->no);
    if (!path)
        return RP_ENOMEM;
    int fd = open(path, O_RDWR);
    free(path);
    if (fd < 0)
        return -errno;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = -errno;
        close(fd);
        return e;
    }
    uint64_t size = (uint64_t)st.st_size, pos = 0;
    const uint8_t *m = NULL;
    if (size) {
        m = (const uint8_t *)mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = -errno;
            close(fd);
            return e;
        }
    }
    while (pos + RP_LOG_HDR <= size) {
        const uint8_t *r = m + pos;
        uint32_t reclen = rp_ld32(r + 4);
        uint32_t plen = rp_ld32(r + 44);
        if (reclen < RP_LOG_HDR || plen > RP_LOG_MAX_PAYLOAD || reclen != RP_LOG_HDR + plen ||
            reclen > size - pos)
            break;
        if (rp_crc32c(0, r + 4, reclen - 4) != rp_ld32(r))
            break;
        uint32_t sender = rp_ld32(r + 8), inc = rp_ld32(r + 12);
        uint64_t seq = rp_ld64(r + 16);
        int64_t sid = rp_log_stream(l, sender, inc);
        if (sid < 0)
            break;
        rp_lstream_t *stm = &l->streams[sid];
        if (!lp_get(&stm->idx, seq) && lp_set(&stm->idx, seq, POS(seg->no, pos) + 1) == RP_OK) {
            stream_note(stm, seq);
            seg_note(seg, (uint32_t)sid, seq);
        }
        l->rec_records++;
        pos += reclen;
    }
    if (m)
        munmap((void *)m, size);
    if (pos < size) {
        if (is_last) {
            /* Torn tail of an interrupted write: cut it off. */
            if (ftruncate(fd, (off_t)pos) == 0)
                l->rec_truncated_bytes += size - pos;
        } else {
            l->rec_bad++;
        }
    }
    seg->size = pos;
    close(fd);
    return (int64_t)pos;
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

/* Rebuild the index from the segments found (the last one may end in a
 * torn record).  RP_OK or a negative error. */
static int recover(rp_log_t *l, const uint64_t *nos, size_t nn) {
    for (size_t i = 0; i < nn; i++) {
        if (seg_add(l, nos[i]))
            return RP_ENOMEM;
        int64_t r = scan_segment(l, l->nsegs - 1, i + 1 == nn);
        if (r < 0)
            return (int)r;
    }
    return RP_OK;
}

/* Open the last segment (a new one in an empty log) for appending, and make
 * its directory entry durable.  RP_OK or a negative error. */
static int open_tail(rp_log_t *l) {
    if (!l->nsegs && seg_add(l, 0))
        return RP_ENOMEM;
    char *path = seg_path(l, l->segs[l->nsegs - 1].no);
    if (!path)
        return RP_ENOMEM;
    l->fd = open(path, O_RDWR | O_CREAT, 0644);
    free(path);
    if (l->fd < 0)
        return -errno;
    l->wpos = l->segs[l->nsegs - 1].size;
    int dfd = open(l->dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return RP_OK;
}

int rp_log_open(rp_log_t *l, const char *dir, uint64_t seg_limit) {
    memset(l, 0, sizeof(*l));
    l->fd = -1;
    l->seg_limit = seg_limit ? seg_limit : (64u << 20);
    l->dir = strdup(dir);
    l->wcap = 1 << 20;
    l->wbuf = (uint8_t *)malloc(l->wcap);
    l->rcap = RP_LOG_HDR + RP_LOG_MAX_PAYLOAD;
    l->rbuf = (uint8_t *)malloc(l->rcap);
    if (!l->dir || !l->wbuf || !l->rbuf || rp_hmap_init(&l->sindex, 64, 0)) {
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
    if (rc == RP_OK)
        rc = open_tail(l);
    if (rc != RP_OK) {
        rp_log_close(l);
        return rc;
    }
    l->appended = l->synced = l->rec_records;
    return RP_OK;
}

void rp_log_close(rp_log_t *l) {
    if (l->fd >= 0) {
        rp_log_sync(l);
        close(l->fd);
    }
    for (uint32_t i = 0; i < l->nsegs; i++)
        seg_free(&l->segs[i]);
    free(l->segs);
    for (uint32_t i = 0; i < l->nstreams; i++)
        lp_free(&l->streams[i].idx);
    free(l->streams);
    free(l->wbuf);
    free(l->rbuf);
    free(l->dir);
    rp_hmap_free(&l->sindex);
    memset(l, 0, sizeof(*l));
    l->fd = -1;
}

void rp_log_abandon(rp_log_t *l) {
    l->wlen = 0;            /* the user-space write buffer dies with the process */
    rp_log_close(l);
}

/* ---- append / sync ----------------------------------------------------- */

int rp_log_flush(rp_log_t *l) {
    size_t done = 0;
    while (done < l->wlen) {
        ssize_t w = pwrite(l->fd, l->wbuf + done, l->wlen - done, (off_t)(l->wpos + done));
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        done += (size_t)w;
    }
    l->wpos += l->wlen;
    l->wlen = 0;
    return RP_OK;
}

int rp_log_sync(rp_log_t *l) {
    int rc = rp_log_flush(l);
    if (rc)
        return rc;
    if (fdatasync(l->fd) < 0)
        return -errno;
    l->synced = l->appended;
    return RP_OK;
}

static int roll(rp_log_t *l) {
    int rc = rp_log_sync(l);
    if (rc)
        return rc;
    uint64_t no = l->segs[l->nsegs - 1].no + 1;
    if (seg_add(l, no))
        return RP_ENOMEM;
    char *path = seg_path(l, no);
    if (!path)
        return RP_ENOMEM;
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0644);
    free(path);
    if (fd < 0)
        return -errno;
    close(l->fd);
    l->fd = fd;
    l->wpos = 0;
    int dfd = open(l->dir, O_RDONLY | O_DIRECTORY);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    return RP_OK;
}

int rp_log_append(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq, uint64_t label,
                  int64_t t, const uint8_t *payload, uint32_t plen) {
    if (plen > RP_LOG_MAX_PAYLOAD)
        return RP_EINVAL;
    int64_t sid = rp_log_stream(l, sender, inc);
    if (sid < 0)
        return (int)sid;
    /* Below the GC frontier the record was stable everywhere and is gone:
     * logging it again would only bring back what GC already collected. */
    if (seq < l->streams[sid].gc_below || lp_get(&l->streams[sid].idx, seq))
        return 1;
    uint32_t reclen = RP_LOG_HDR + plen;
    rp_lseg_t *seg = &l->segs[l->nsegs - 1];
    if (seg->size && seg->size + reclen > l->seg_limit) {
        int rc = roll(l);
        if (rc)
            return rc;
        seg = &l->segs[l->nsegs - 1];
    }
    if (l->wlen + reclen > l->wcap) {
        int rc = rp_log_flush(l);
        if (rc)
            return rc;
    }
    uint8_t *r = l->wbuf + l->wlen;
    rp_st32(r + 4, reclen);
    rp_st32(r + 8, sender);
    rp_st32(r + 12, inc);
    rp_st64(r + 16, seq);
    rp_st64(r + 24, label);
    rp_st64(r + 32, (uint64_t)t);
    rp_st32(r + 40, 0);
    rp_st32(r + 44, plen);
    if (plen)
        memcpy(r + RP_LOG_HDR, payload, plen);
    rp_st32(r, rp_crc32c(0, r + 4, reclen - 4));
    uint64_t off = l->wpos + l->wlen;
    if (lp_set(&l->streams[sid].idx, seq, POS(seg->no, off) + 1))
        return RP_ENOMEM;
    l->wlen += reclen;
    seg->size += reclen;
    seg_note(seg, (uint32_t)sid, seq);
    stream_note(&l->streams[sid], seq);
    l->appended++;
    l->bytes += reclen;
    return RP_OK;
}

/* ---- read -------------------------------------------------------------- */

int rp_log_has(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq) {
    uint64_t *v = rp_hmap_get(&l->sindex, ((uint64_t)sender << 32) | inc, 0);
    return v && lp_get(&l->streams[*v].idx, seq) != 0;
}

long rp_log_read(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq, const uint8_t **payload,
                 uint64_t *label) {
    uint64_t *v = rp_hmap_get(&l->sindex, ((uint64_t)sender << 32) | inc, 0);
    if (!v)
        return -1;
    uint64_t pv = lp_get(&l->streams[*v].idx, seq);
    if (!pv)
        return -1;
    uint64_t segno = POS_SEG(pv - 1), off = POS_OFF(pv - 1);
    const uint8_t *r;
    rp_lseg_t *cur = &l->segs[l->nsegs - 1];
    if (segno == cur->no && off >= l->wpos) {
        r = l->wbuf + (off - l->wpos);          /* still in the write buffer */
    } else {
        int fd = l->fd;
        int own = 0;
        if (segno != cur->no) {
            char *path = seg_path(l, segno);
            if (!path)
                return RP_ENOMEM;
            fd = open(path, O_RDONLY);
            free(path);
            if (fd < 0)
                return -2;
            own = 1;
        }
        ssize_t k = pread(fd, l->rbuf, RP_LOG_HDR, (off_t)off);
        long rc = 0;
        if (k != RP_LOG_HDR) {
            rc = -2;
        } else {
            uint32_t reclen = rp_ld32(l->rbuf + 4);
            if (reclen < RP_LOG_HDR || reclen > l->rcap) {
                rc = -3;
            } else if (reclen > RP_LOG_HDR &&
                       pread(fd, l->rbuf + RP_LOG_HDR, reclen - RP_LOG_HDR,
                             (off_t)(off + RP_LOG_HDR)) != (ssize_t)(reclen - RP_LOG_HDR)) {
                rc = -2;
            }
        }
        if (own)
            close(fd);
        if (rc)
            return rc;
        r = l->rbuf;
    }
    uint32_t reclen = rp_ld32(r + 4);
    if (rp_crc32c(0, r + 4, reclen - 4) != rp_ld32(r) || rp_ld64(r + 16) != seq)
        return -3;
    *payload = r + RP_LOG_HDR;
    if (label)
        *label = rp_ld64(r + 24);
    return (long)rp_ld32(r + 44);
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
    int64_t dropped = 0;
    if (s->count) {
        uint64_t from = s->min_seq > s->gc_below ? s->min_seq : s->gc_below;
        uint64_t to = below < s->max_seq + 1 ? below : s->max_seq + 1;
        for (uint64_t q = from; q < to; q++)
            if (lp_get(&s->idx, q)) {
                lp_set(&s->idx, q, 0);
                dropped++;
            }
        s->count -= (uint64_t)dropped;
    }
    s->gc_below = below;
    rp_log_gc_segments(l);
    return dropped;
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
        seg_free(s);
        deleted++;
    }
    l->nsegs = w;
    return deleted;
}
