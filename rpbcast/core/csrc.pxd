# Declarations of the C core in csrc/ (one block per header).
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int64_t


cdef extern from "rp_common.h" nogil:
    enum:
        RP_OK
        RP_ENOMEM
        RP_EINVAL
        RP_EFULL
        RP_EIO
    ctypedef struct rp_ival_t:
        uint64_t lo
        uint64_t hi


cdef extern from "iset.h" nogil:
    ctypedef struct rp_iset_t:
        rp_ival_t *v
        uint32_t n
        uint32_t cap
        uint32_t max_n
        uint64_t count
    int rp_iset_init(rp_iset_t *s, uint32_t cap_hint, uint32_t max_n)
    void rp_iset_free(rp_iset_t *s)
    void rp_iset_clear(rp_iset_t *s)
    int64_t rp_iset_add(rp_iset_t *s, uint64_t lo, uint64_t hi)
    int64_t rp_iset_remove(rp_iset_t *s, uint64_t lo, uint64_t hi)
    int rp_iset_contains(const rp_iset_t *s, uint64_t x)
    int64_t rp_iset_find(const rp_iset_t *s, uint64_t x)
    int rp_iset_next(const rp_iset_t *s, uint64_t x, uint64_t *out)


cdef extern from "seqtrack.h" nogil:
    uint64_t RP_SEQ_LIMIT
    enum:
        RP_ACC_DUP
        RP_ACC_NEW
        RP_ACC_FILL
        RP_ACC_FAR
        RP_ACC_NOMEM
    ctypedef struct rp_seqtrack_t:
        uint64_t base
        uint64_t next
        uint64_t max_gap
        rp_iset_t missing
        uint64_t n_new, n_fill, n_dup, n_far, n_nomem, n_gaps
    int rp_seqtrack_init(rp_seqtrack_t *t, uint64_t base, uint64_t max_gap, uint32_t max_intervals)
    void rp_seqtrack_free(rp_seqtrack_t *t)
    int rp_seqtrack_accept(rp_seqtrack_t *t, uint64_t seq, uint64_t *gap_lo, uint64_t *gap_hi)
    int64_t rp_seqtrack_heartbeat(rp_seqtrack_t *t, uint64_t seq, uint64_t *gap_lo, uint64_t *gap_hi)
    size_t rp_seqtrack_accept_batch(rp_seqtrack_t *t, const uint64_t *seqs, size_t n, uint8_t *out)
    int64_t rp_seqtrack_forget(rp_seqtrack_t *t, uint64_t lo, uint64_t hi)
    int rp_seqtrack_received(const rp_seqtrack_t *t, uint64_t seq)
    uint64_t rp_seqtrack_contiguous(const rp_seqtrack_t *t)


cdef extern from "digest.h" nogil:
    enum:
        RP_DIG_TRUNCATED
        RP_DIG_BAD_VARINT
        RP_DIG_BAD_RANGE
        RP_DIG_TOO_MANY
    const char *rp_digest_error_name(long code)
    size_t rp_digest_encode(const rp_ival_t *iv, size_t n, uint64_t frm, uint64_t upto,
                            uint8_t *buf, size_t budget, uint64_t *out_upto, size_t *out_n)
    long rp_digest_decode(const uint8_t *buf, size_t length, rp_ival_t *out, size_t max_out,
                          size_t *n_out, uint64_t *frm, uint64_t *upto)
    long rp_digest_check(const uint8_t *buf, size_t length, size_t *n_out)
    size_t rp_varint_put(uint8_t *p, uint64_t v)
    size_t rp_varint_get(const uint8_t *p, size_t length, uint64_t *v)


cdef extern from "signature.h" nogil:
    uint64_t RP_SIG_SEED
    uint64_t rp_xxh64(const void *data, size_t length, uint64_t seed)
    uint64_t rp_sig_entry(uint32_t key, uint32_t a, uint64_t b, uint64_t seed)
    ctypedef struct rp_sigvec_t:
        uint64_t seed
        uint64_t sig
        uint32_t cap
        uint32_t count
        uint64_t *hash
        uint8_t *present
    int rp_sigvec_init(rp_sigvec_t *v, uint32_t cap, uint64_t seed)
    void rp_sigvec_free(rp_sigvec_t *v)
    int rp_sigvec_set(rp_sigvec_t *v, uint32_t slot, uint32_t key, uint32_t a, uint64_t b)
    void rp_sigvec_del(rp_sigvec_t *v, uint32_t slot)


cdef extern from "stability.h" nogil:
    enum:
        RP_STAB_REDUNDANT
        RP_STAB_ADOPTED
        RP_STAB_MERGED
        RP_STAB_NEXT
        RP_STAB_FUTURE
        RP_STAB_OLD
        RP_STAB_COMPLETED
    ctypedef struct rp_stab_t:
        uint32_t m, n, mcap, ncap, self
        uint64_t round
        uint64_t *R
        uint64_t *M
        uint64_t *S
        uint64_t *W
        uint64_t *alive
        uint32_t *L
        uint64_t n_rounds
    int rp_stab_init(rp_stab_t *s, uint32_t m, uint32_t n, uint32_t self)
    void rp_stab_free(rp_stab_t *s)
    int rp_stab_resize(rp_stab_t *s, uint32_t m, uint32_t n)
    void rp_stab_set_R(rp_stab_t *s, uint32_t j, uint64_t v)
    void rp_stab_start_round(rp_stab_t *s)
    int rp_stab_merge(rp_stab_t *s, const uint64_t *M, const uint64_t *W, const uint64_t *S,
                      uint64_t r, uint32_t m_in, uint32_t n_in)
    int rp_stab_merge_S(rp_stab_t *s, const uint64_t *S, uint32_t m_in, uint64_t r)
    int rp_stab_complete(const rp_stab_t *s)
    int rp_stab_check(rp_stab_t *s)
    void rp_stab_fd_step(rp_stab_t *s)
    void rp_stab_fd_heard(rp_stab_t *s, uint32_t i)
    void rp_stab_fd_merge(rp_stab_t *s, const uint32_t *L, uint32_t n_in)
    uint32_t rp_stab_fd_failed(rp_stab_t *s, uint32_t K)
    void rp_stab_set_alive(rp_stab_t *s, uint32_t i, int alive)
    int rp_stab_is_alive(const rp_stab_t *s, uint32_t i)
    int rp_stab_heard(const rp_stab_t *s, uint32_t i)


cdef extern from "hmap.h" nogil:
    ctypedef struct rp_hmap_t:
        uint64_t mask
        uint64_t n
        uint64_t max_n
    int rp_hmap_init(rp_hmap_t *m, uint64_t cap_hint, uint64_t max_n)
    void rp_hmap_free(rp_hmap_t *m)
    uint64_t *rp_hmap_get(const rp_hmap_t *m, uint64_t key, uint32_t tag)
    int rp_hmap_put(rp_hmap_t *m, uint64_t key, uint32_t tag, uint64_t val)
    int rp_hmap_del(rp_hmap_t *m, uint64_t key, uint32_t tag, uint64_t *old)


cdef extern from "srb.h" nogil:
    uint64_t RP_SRB_NOLABEL
    enum:
        RP_SQ_EMPTY
        RP_SQ_QUEUED
        RP_SQ_PURGED
        RP_SQ_R_QUEUED
        RP_SQ_R_OLD
    ctypedef struct rp_srbq_t:
        uint64_t head, ready, tail, w, max_held
        rp_hmap_t labels
        uint64_t n_queued, n_delivered, n_purged_queue
        uint64_t n_purged_inferred, n_purged_marked
    int rp_srbq_init(rp_srbq_t *q, uint64_t base, uint64_t w, uint64_t cap, uint64_t max_cap)
    void rp_srbq_free(rp_srbq_t *q)
    int rp_srbq_insert(rp_srbq_t *q, uint64_t seq, uint64_t label, uint64_t handle)
    size_t rp_srbq_take_purged(rp_srbq_t *q, uint64_t *handles, uint64_t *seqs, size_t mx)
    int64_t rp_srbq_infer(rp_srbq_t *q, uint64_t t, uint64_t *lo, uint64_t *hi)
    int rp_srbq_mark_purged(rp_srbq_t *q, uint64_t seq)
    uint64_t rp_srbq_mark_purged_range(rp_srbq_t *q, uint64_t lo, uint64_t hi)
    int rp_srbq_peek(const rp_srbq_t *q, uint64_t *handle)
    size_t rp_srbq_pop(rp_srbq_t *q, uint64_t *handles, uint64_t *seqs, size_t mx)
    uint64_t rp_srbq_pending(const rp_srbq_t *q)

    enum:
        RP_SW_FREE
        RP_SW_OUT
        RP_SW_OBSOLETE
        RP_SW_PURGED
        RP_SW_STABLE
    ctypedef struct rp_srbw_t:
        uint64_t low, next, w, safe, stable, cap
        rp_hmap_t labels
        uint64_t n_sent, n_purged, n_stable
    int rp_srbw_init(rp_srbw_t *s, uint64_t base, uint64_t w)
    void rp_srbw_free(rp_srbw_t *s)
    int rp_srbw_can_send(const rp_srbw_t *s)
    int rp_srbw_sent(rp_srbw_t *s, uint64_t label, uint64_t handle)
    size_t rp_srbw_set_safe(rp_srbw_t *s, uint64_t upto, uint64_t *seqs, uint64_t *sup,
                            uint64_t *handles, size_t mx)
    size_t rp_srbw_set_stable(rp_srbw_t *s, uint64_t upto, uint64_t *handles, size_t mx)
    int rp_srbw_purged_by(const rp_srbw_t *s, uint64_t seq, uint64_t *sup)


cdef extern from "msgstore.h" nogil:
    enum:
        RP_MS_DELIVER
        RP_MS_GOSSIP
        RP_MS_SEND
        RP_MS_SRB
        RP_MS_LOG
        RP_MS_APP
        RP_MS_QUEUE
    ctypedef struct rp_msent_t:
        uint64_t seq
        uint64_t label
        int64_t t
        uint64_t mpos
        uint32_t len
        uint32_t sender
        uint32_t holds
        uint32_t age
    ctypedef struct rp_mstore_t:
        uint64_t acap, bhead, btail, emask, head, tail
        uint64_t gc_cursor, deliver_cursor, gossip_bytes, gossip_count
        uint64_t n_put, n_full, n_evicted, n_freed
    int rp_mstore_init(rp_mstore_t *s, uint64_t arena_bytes, uint64_t max_entries, int prefault)
    void rp_mstore_free(rp_mstore_t *s)
    int64_t rp_mstore_put(rp_mstore_t *s, uint32_t sender, uint64_t seq, uint64_t label,
                          int64_t t, uint32_t age, uint32_t holds, uint32_t evictable,
                          const uint8_t *payload, uint32_t length)
    int rp_mstore_valid(const rp_mstore_t *s, uint64_t ticket)
    rp_msent_t *rp_mstore_entry(const rp_mstore_t *s, uint64_t ticket)
    uint8_t *rp_mstore_data(const rp_mstore_t *s, const rp_msent_t *e)
    int64_t rp_mstore_find(const rp_mstore_t *s, uint32_t sender, uint64_t seq)
    void rp_mstore_release(rp_mstore_t *s, uint64_t ticket, uint32_t holds)
    uint64_t rp_mstore_gc(rp_mstore_t *s, uint32_t min_age, uint64_t max_bytes)
    size_t rp_mstore_take_deliveries(rp_mstore_t *s, uint64_t *tickets, size_t mx)
    uint64_t rp_mstore_bytes_used(const rp_mstore_t *s)
    uint64_t rp_mstore_count(const rp_mstore_t *s)


cdef extern from "wire.h" nogil:
    enum:
        RP_WIRE_MAGIC
        RP_WIRE_VERSION
        RP_DG_HDR
        RP_MSG_HDR
        RP_WIRE_MAX_DGRAM
        RP_WIRE_MAX_MAC
        RP_WIRE_MAX_MSGS
        RP_DGF_MAC
        RP_DGF_ENC
        RP_DGF_SIG
        RP_SEC_HDR
        RP_GOSSIP_FIXED
        RP_MEMBER_ENTRY
        RP_HB_ENTRY
    enum:
        RP_T_PAD
        RP_T_DATA
        RP_T_REPAIR
        RP_T_HEARTBEAT
        RP_T_GOSSIP
        RP_T_HBLIST
        RP_T_RTX
        RP_T_GCNOTE
        RP_T_LOGACK
        RP_T_JOIN
        RP_T_LEAVE
        RP_T_MEMBERS
        RP_T_STABILITY
        RP_T_GAPNOTE
        RP_T_PURGED
        RP_T_WINDOW
        RP_T_SEQBLOCK
        RP_T_PING
        RP_T_PONG
        RP_T_FLOWACK
        RP_T__COUNT
    enum:
        RP_MF_LABEL
        RP_MF_FROM_LOGGER
        RP_MF_IDLE
        RP_MF_FIRST
        RP_MF_REPLY
        RP_MF_PUSH
        RP_MF_VECTOR
        RP_MF_LOST
    enum:
        RP_SEC_MISSING
        RP_SEC_LASTSEEN
        RP_SEC_STABILITY
        RP_SEC_LIVE
        RP_SEC__COUNT
    enum:
        RP_WR_OK
        RP_WR_BODY
        RP_WR__COUNT
    const char *rp_wire_reason_names[]
    const char *rp_wire_type_names[]
    const char *rp_wire_section_names[]
    ctypedef struct rp_dghdr_t:
        uint32_t group
        uint32_t source
        uint32_t source_inc
        uint32_t dseq
        uint16_t count
        uint16_t mac_len
        uint8_t version
        uint8_t dflags
    ctypedef struct rp_msgview_t:
        const uint8_t *body
        uint64_t seq
        uint32_t sender
        uint32_t inc
        uint32_t aux
        uint16_t len
        uint8_t type
        uint8_t flags
    int rp_wire_parse(const uint8_t *buf, size_t length, size_t max_len, rp_dghdr_t *h,
                      rp_msgview_t *msgs, size_t max_msgs)
    int rp_wire_check_body(uint8_t type, uint8_t flags, const uint8_t *body, size_t length)
    ctypedef struct rp_secit_t:
        const uint8_t *p
        const uint8_t *end
    void rp_secit_init(rp_secit_t *it, const uint8_t *p, size_t length)
    int rp_secit_next(rp_secit_t *it, uint8_t *kind, uint8_t *flags, const uint8_t **data,
                      uint16_t *slen)
    ctypedef struct rp_dgb_t:
        uint8_t *buf
        size_t cap
        size_t len
        uint16_t count
        uint16_t mac_len
    void rp_dgb_begin(rp_dgb_t *b, uint8_t *buf, size_t cap, uint32_t group, uint32_t source,
                      uint32_t source_inc, uint32_t dseq)
    uint8_t *rp_dgb_add(rp_dgb_t *b, uint8_t type, uint8_t flags, uint32_t sender, uint32_t inc,
                        uint32_t aux, uint64_t seq, size_t body_len)
    size_t rp_dgb_room(const rp_dgb_t *b)
    void rp_dgb_trim_last(rp_dgb_t *b, size_t body_len)
    int rp_dgb_pad_to(rp_dgb_t *b, size_t size)
    size_t rp_dgb_finish(rp_dgb_t *b)


cdef extern from "addrcheck.h" nogil:
    int64_t RP_AC_WINDOW_NS
    ctypedef struct rp_acstats_t:
        uint64_t requests, capped_msgs, capped_bytes, cookies_sent, cookies_echoed, cookies_bad
        uint64_t not_admitted
    ctypedef struct rp_addrcheck_t:
        double factor
        size_t nmembers
        rp_acstats_t st
    void rp_ac_set_admit(rp_addrcheck_t *ac, double rate, double burst)
    int rp_ac_set_members(rp_addrcheck_t *ac, const uint64_t *addrs, size_t n)
    int rp_ac_validated(rp_addrcheck_t *ac, uint64_t addr)
    uint64_t rp_ac_cookie(const rp_addrcheck_t *ac, uint64_t addr, uint64_t w)


cdef extern from "outbox.h" nogil:
    uint64_t RP_DEST_MCAST
    ctypedef struct rp_outd_t:
        uint64_t dest
        uint32_t off
        uint32_t len
    ctypedef struct rp_outbox_t:
        uint8_t *buf
        size_t cap, used
        rp_outd_t *d
        size_t n, dcap
        uint32_t mtu
        uint64_t n_dgrams, n_bytes
        size_t reply_cap
        uint32_t mac_room
        rp_addrcheck_t *ac
        uint64_t drop_full_msgs, drop_full_bytes
    int rp_out_set_addrcheck(rp_outbox_t *o, double factor)
    int rp_out_heard(rp_outbox_t *o, uint64_t src, uint8_t type, uint64_t seq, const uint8_t *body,
                     size_t len, int64_t now)
    uint8_t *rp_out_msg(rp_outbox_t *o, uint64_t dest, uint8_t type, uint8_t flags, uint32_t sender,
                        uint32_t inc, uint32_t aux, uint64_t seq, size_t body_len)
    size_t rp_out_room(const rp_outbox_t *o, uint64_t dest)
    size_t rp_out_max_body(const rp_outbox_t *o)
    void rp_out_flush(rp_outbox_t *o)
    void rp_out_clear(rp_outbox_t *o)
    void rp_out_consume(rp_outbox_t *o, size_t k)
    size_t rp_out_pending(const rp_outbox_t *o)


cdef extern from "trace.h" nogil:
    enum:
        RP_EV_SEND
        RP_EV_RECV
        RP_EV_RECV_DUP
        RP_EV_DELIVER
        RP_EV_GAP
        RP_EV_GOSSIP_OUT
        RP_EV_GOSSIP_IN
        RP_EV_RTX_REQ
        RP_EV_RTX_SERVED
        RP_EV_GCNOTE
        RP_EV_HEARTBEAT
        RP_EV_MEMBER
        RP_EV_PURGE
        RP_EV_LOST
        RP_EV__COUNT
    const char *rp_trace_event_names[]
    ctypedef struct rp_trace_t:
        size_t cap, n
        int64_t *t
        uint8_t *ev
        uint32_t *sender
        uint32_t *inc
        uint32_t *size
        uint32_t *aux
        uint32_t *count
        uint64_t *seq
        uint64_t *peer
        uint64_t dropped
    int rp_trace_init(rp_trace_t *tr, size_t cap)
    void rp_trace_clear(rp_trace_t *tr)
    void rp_trace(rp_trace_t *tr, int64_t t, uint8_t ev, uint32_t sender, uint32_t inc,
                  uint64_t seq, uint32_t size, uint64_t peer, uint32_t aux)
    void rp_trace_free(rp_trace_t *tr)


cdef extern from "logstore.h" nogil:
    enum:
        RP_LOG_HDR
        RP_LOG_MAX_PAYLOAD
        RP_LOG_VERSION
        RP_LOG_ABSENT
        RP_LOG_IOERR
        RP_LOG_DAMAGED
    uint32_t rp_crc32c(uint32_t crc, const void *data, size_t length)
    uint32_t rp_crc32c_sw(uint32_t crc, const void *data, size_t length)
    ctypedef struct rp_lstream_t:
        uint32_t sender, inc
        uint64_t gc_below, count, min_seq, max_seq
        rp_iset_t damaged
    ctypedef struct rp_log_t:
        uint32_t nsegs
        uint32_t nstreams
        rp_lstream_t *streams
        uint64_t appended, synced, bytes, runs
        uint64_t n_preads, n_syncs
        int direct
        uint64_t rec_records, rec_runs, rec_bad, rec_truncated_bytes
        uint64_t rec_damaged_records, rec_damaged_ids, rec_damaged_bytes, rec_repaired
        uint64_t rec_converted, rd_damaged
    int rp_log_open(rp_log_t *l, const char *dir, uint64_t seg_limit)
    int rp_log_open_mode(rp_log_t *l, const char *dir, uint64_t seg_limit, int direct)
    void rp_log_close(rp_log_t *l)
    void rp_log_abandon(rp_log_t *l)
    int64_t rp_log_find_stream(const rp_log_t *l, uint32_t sender, uint32_t inc)
    int rp_log_append(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq, uint64_t label,
                      int64_t t, const uint8_t *payload, uint32_t plen)
    int rp_log_flush(rp_log_t *l)
    int rp_log_sync(rp_log_t *l)
    int rp_log_sync_start(rp_log_t *l, uint64_t *epoch)
    uint64_t rp_log_synced_epoch(rp_log_t *l, int *err)
    int rp_log_wait_synced(rp_log_t *l, uint64_t epoch)
    int rp_log_has(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq)
    int rp_log_durable(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq)
    long rp_log_read(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t seq,
                     const uint8_t **payload, uint64_t *label)
    ctypedef struct rp_log_cursor_t:
        uint64_t seq
    int rp_log_seek(rp_log_t *l, rp_log_cursor_t *c, uint32_t sender, uint32_t inc, uint64_t seq)
    long rp_log_next(rp_log_t *l, rp_log_cursor_t *c, uint64_t hi, uint64_t *seq, const uint8_t **payload,
                     uint64_t *label)
    int64_t rp_log_cover(const rp_log_t *l, uint32_t sid, uint64_t lo, uint64_t hi, rp_iset_t *out)
    void rp_log_intervals(const rp_log_t *l, uint32_t sid, void (*fn)(void *, uint64_t, uint64_t) noexcept nogil,
                          void *arg)
    int64_t rp_log_gc(rp_log_t *l, uint32_t sender, uint32_t inc, uint64_t below)
    int rp_log_gc_segments(rp_log_t *l)


cdef extern from "conflate.h" nogil:
    ctypedef struct rp_cval_t:
        uint32_t sender, inc
        uint64_t label, seq
        int64_t t
        uint8_t *buf
        uint32_t len, cap
    ctypedef struct rp_conflate_t:
        rp_cval_t *v
        uint32_t n, cap
        uint64_t updates, stale
    int rp_conflate_init(rp_conflate_t *c)
    void rp_conflate_free(rp_conflate_t *c)
    int64_t rp_conflate_find(const rp_conflate_t *c, uint32_t sender, uint64_t label)


cdef extern from "auth.h" nogil:
    int RP_AUTH_TRAILER
    int RP_AUTH_KEY_LEN

cdef extern from "flowack.h" nogil:
    ctypedef struct rp_flowmember_t:
        uint32_t id, inc
        uint64_t addr
        uint8_t counts
        uint64_t front
        uint64_t sent
    ctypedef struct rp_flowack_t:
        rp_flowmember_t *m
        uint32_t n
        uint64_t limit
        uint32_t every
        int64_t resend_ns, stale_ns
        uint64_t front
        int active
        uint64_t n_tx, n_rx, n_rejected, n_stale, n_batches
        uint64_t gap_hist[16]
        uint64_t limit_bytes, pub_bytes
    int RP_FLOWACK_MAX_MEMBERS

cdef extern from "reqlimit.h" nogil:
    ctypedef struct rp_reqlimit_t:
        double rate, burst
        uint32_t n, max
        uint64_t n_limited, n_evicted


cdef extern from "node.h" nogil:
    uint32_t RP_SELF_SLOT
    uint32_t RP_NO_SLOT
    uint64_t RP_NOT_IDLE
    enum:
        RP_PHASE_GOSSIP
        RP_PHASE_LOGGER
        RP_PHASE_ALL
        RP_PHASE_NEW
        RP_PHASE_LOGGER_NEW
    enum:
        RP_C__COUNT
        RP_C_LOGGED
    const char *rp_node_counter_names[]
    ctypedef struct rp_peer_t:
        uint32_t id, inc, slot
        rp_seqtrack_t st
        rp_iset_t lmissing
        rp_iset_t inflight
        rp_iset_t lflight
        uint64_t idle_seq
        uint64_t gossip_cursor
        int64_t last_heard
        uint64_t addr
        rp_srbq_t *q
        uint8_t dead
        uint8_t own_heard
        uint8_t stranger
        uint64_t rx_new, rx_fill, rx_dup
    ctypedef struct rp_ctl_t:
        const uint8_t *body
        uint64_t seq
        uint64_t src_addr
        uint32_t sender, inc, aux
        uint32_t source, source_inc
        uint16_t len
        uint8_t type, flags
    ctypedef struct rp_auth_t:
        pass
    # frag.h, streams.h: large messages and streams
    enum:
        RP_FRAG_D__COUNT
        RP_EXT_HDR
    const uint64_t RP_LABEL_EXT
    const char *const rp_frag_drop_names[]
    ctypedef struct rp_frag_t:
        uint32_t n
        uint64_t bytes, max_bytes
        uint64_t whole, fragments
        uint64_t dropped[4]
        uint64_t spare_bytes, buf_fresh
    ctypedef struct rp_stream_t:
        uint32_t id
        uint8_t subscribed
        uint64_t received, filtered, delivered, bytes
    ctypedef struct rp_streams_t:
        uint8_t all
        rp_stream_t *v
        uint32_t n
        rp_stream_t other
    int rp_streams_set(rp_streams_t *s, uint32_t id, int on)
    void rp_streams_all(rp_streams_t *s, int all)
    int rp_streams_wants(rp_streams_t *s, uint32_t id)

    ctypedef struct rp_node_t:
        uint32_t group, id, inc
        rp_auth_t *auth
        rp_reqlimit_t *reqlimit
        uint8_t deliver_own, fifo, is_logger, tracing, no_deliver, hold_send
        rp_flowack_t *flowack
        uint64_t srb_w
        size_t max_dgram
        uint32_t max_scan
        uint64_t next_seq, acked
        int64_t last_publish
        rp_srbw_t *srbw
        rp_peer_t **peers
        uint32_t npeers
        uint32_t nlive, nprotected, nretired, nfree
        uint32_t max_streams, max_per_node
        uint32_t npool, max_strangers
        uint8_t members_known
        rp_sigvec_t hbsig
        rp_mstore_t store
        uint32_t round
        rp_outbox_t out
        rp_ctl_t *ctl
        size_t nctl
        uint32_t nack_pending
        uint64_t c[1]
        uint64_t rx_reason[1]
        uint64_t msgs_in[1]
        uint64_t bytes_in[1]
        uint64_t msgs_out[1]
        uint64_t bytes_out[1]
        rp_trace_t trace
        rp_log_t *log
        uint8_t conflate
        rp_conflate_t latest
        rp_frag_t frag
        rp_streams_t streams
        uint64_t max_message
        uint64_t recv_need
    ctypedef struct rp_node_cfg_t:
        uint32_t group, id, inc, mtu
        uint64_t store_bytes, store_entries, max_gap, srb_w
        uint32_t max_scan, max_streams, max_per_node, max_strangers
        uint8_t deliver_own, fifo, is_logger, no_deliver, prefault
        uint64_t max_message, reassembly_bytes
    int rp_node_init(rp_node_t *n, const rp_node_cfg_t *cfg)
    int rp_node_set_auth(rp_node_t *n, const uint8_t *ids, const uint8_t *keys, int nkeys,
                         uint64_t counter0)
    void rp_node_free(rp_node_t *n)
    uint32_t rp_node_find_peer(rp_node_t *n, uint32_t id, uint32_t inc)
    int64_t rp_node_peer(rp_node_t *n, uint32_t id, uint32_t inc, uint64_t base)
    rp_peer_t *rp_node_peer_at(rp_node_t *n, uint32_t slot)
    uint32_t rp_node_take_retired(rp_node_t *n, uint32_t *out, uint32_t max)
    uint32_t rp_node_set_members(rp_node_t *n, const uint32_t *ids, const uint8_t *is_member, size_t k)
    int rp_node_is_member(rp_node_t *n, uint32_t id)
    void rp_node_peer_dead(rp_node_t *n, uint32_t slot)
    int rp_node_rx(rp_node_t *n, const uint8_t *buf, size_t length, uint64_t src_addr, int64_t now)
    int64_t rp_node_heartbeat(rp_node_t *n, uint32_t slot, uint64_t seq, int idle, int64_t now)
    uint32_t rp_node_infer_idle(rp_node_t *n, int64_t now, int64_t silent_ns)
    void rp_node_ctl_clear(rp_node_t *n)
    uint8_t *rp_node_out_msg(rp_node_t *n, uint64_t dest, uint8_t type, uint8_t flags,
                             uint32_t sender, uint32_t inc, uint32_t aux, uint64_t seq,
                             size_t body_len)
    int64_t rp_node_publish(rp_node_t *n, const uint8_t *payload, uint32_t length, uint64_t label,
                            int64_t now)
    size_t rp_node_publish_batch(rp_node_t *n, const uint8_t *payloads, const uint32_t *lens,
                                 const uint64_t *labels, size_t count, int64_t now)
    int64_t rp_node_publish_ext(rp_node_t *n, const uint8_t *payload, uint64_t length, uint64_t label,
                                uint32_t stream, int64_t now)
    size_t rp_node_publish_batch_ext(rp_node_t *n, const uint8_t *payloads, const uint32_t *lens,
                                     const uint64_t *labels, size_t count, uint32_t stream, int64_t now)
    int rp_node_send_heartbeat(rp_node_t *n, int idle)
    uint64_t rp_node_logger_ack(rp_node_t *n, uint64_t upto)
    size_t rp_node_missing(rp_node_t *n, uint32_t slot, int phase, uint64_t frm, uint64_t upto,
                           rp_ival_t *out, size_t mx)
    int64_t rp_node_to_logger_phase(rp_node_t *n, uint32_t slot, uint64_t lo, uint64_t hi)
    int64_t rp_node_forget(rp_node_t *n, uint32_t slot, uint64_t lo, uint64_t hi)
    void rp_node_lflight_mark(rp_node_t *n, uint32_t slot, uint64_t lo, uint64_t hi)
    uint64_t rp_node_lflight_prune(rp_node_t *n, uint32_t slot)
    void rp_node_lflight_clear(rp_node_t *n, uint32_t slot)
    uint64_t rp_node_inflight_prune(rp_node_t *n, uint32_t slot)
    uint64_t rp_node_round(rp_node_t *n, uint32_t gclimit, uint64_t max_bytes)
    uint64_t rp_node_stable(rp_node_t *n, uint32_t slot, uint64_t below)
    uint64_t rp_node_srb_safe(rp_node_t *n, uint32_t slot, uint64_t upto)
    uint64_t rp_node_srb_stable(rp_node_t *n, uint64_t upto)
    int rp_node_srb_purged(rp_node_t *n, uint32_t slot, uint64_t seq, uint64_t sup, int64_t now)
    int64_t rp_node_srb_window(rp_node_t *n, uint32_t slot, uint64_t low, int64_t now)
    int rp_node_srb_purged_by(rp_node_t *n, uint32_t sender, uint32_t inc, uint64_t seq, uint64_t *sup)
    size_t rp_node_recv(rp_node_t *n, size_t mx, uint32_t *senders, uint32_t *incs, uint64_t *seqs,
                        uint64_t *labels, int64_t *rx_times, uint32_t *offs, uint32_t *lens,
                        uint8_t *buf, size_t cap, int64_t now)
    size_t rp_node_recv_ex(rp_node_t *n, size_t mx, uint32_t *senders, uint32_t *incs, uint64_t *seqs,
                           uint64_t *labels, int64_t *rx_times, uint32_t *offs, uint32_t *lens,
                           uint32_t *streams, uint8_t *buf, size_t cap, int64_t now)
    uint64_t rp_node_pending(const rp_node_t *n)


cdef extern from "serve.h" nogil:
    enum:
        RP_SERVE_FROM_LOGGER
        RP_SERVE_GCNOTE
        RP_SERVE_GCNOTE_AT_ONCE
    ctypedef struct rp_served_sec_t:
        uint32_t sender, inc
        size_t asked, nasked
        size_t left, nleft
        size_t gc, ngc
        uint64_t gc_ids
        uint64_t served
    ctypedef struct rp_served_t:
        rp_served_sec_t *sec
        size_t nsec
        rp_ival_t *iv
        size_t niv
    void rp_node_set_rate_limit(rp_node_t *n, double rate, double burst)
    size_t rp_node_serve(rp_node_t *n, uint32_t sender, uint32_t inc, const rp_ival_t *iv, size_t niv,
                         uint64_t dest, int from_logger, rp_iset_t *gc_out, rp_iset_t *left_out,
                         int64_t now)
    void rp_served_init(rp_served_t *s)
    void rp_served_free(rp_served_t *s)
    int rp_node_serve_missing(rp_node_t *n, const uint8_t *body, size_t length, uint64_t dest,
                              unsigned peers, unsigned own, int64_t now, rp_served_t *out)


cdef extern from "catchup.h" nogil:
    int rp_catchup_enable(rp_node_t *n, double rate, double burst, uint32_t per_call)
    size_t rp_catchup_drain(rp_node_t *n, int64_t now)
    uint64_t rp_catchup_pending(const rp_node_t *n)


cdef extern from "reqlimit.h" nogil:
    int rp_node_set_requester_limit(rp_node_t *n, double rate, double burst, uint32_t mx)


cdef extern from "udpio.h" nogil:
    ctypedef struct rp_sockopt_t:
        uint32_t ip
        uint16_t port
        uint32_t if_ip
        int ifindex
        int rcvbuf, sndbuf
        int ttl, loop
        int gro, timestamps
        int reuse
    ctypedef struct rp_sock_t:
        int fd
        int gro
        int gso
        int timestamps
        int rcvbuf, sndbuf
        uint32_t ip
        uint16_t port
        uint64_t n_rx_dgrams, n_rx_calls, n_tx_dgrams, n_tx_calls, n_tx_gso, n_tx_errors
    int rp_sock_open(rp_sock_t *s, const rp_sockopt_t *o, uint32_t group, const char **stage)
    void rp_sock_close(rp_sock_t *s)
    int rp_sock_sendto(rp_sock_t *s, const uint8_t *buf, size_t length, uint64_t addr)


cdef extern from "loop.h" nogil:
    ctypedef int64_t (*rp_control_fn)(void *ctx, int64_t now, int why)
    enum:
        RP_WHY_CTL
        RP_WHY_TIMER
        RP_WHY_NACK
        RP_WHY_RX
    ctypedef struct rp_loop_t:
        rp_node_t *node
        int app_fd
        int stop
        int busy_poll
        int every_rx
        uint32_t max_batches
        rp_control_fn control
        void *ctx
        int64_t next_timer
        int64_t idle_after_ns
        int idle_driven
        int64_t probe_ns
        uint64_t n_probes
        double drop_rate
        uint64_t rng
        uint64_t n_dropped
        uint64_t n_iter, n_wakeups, n_control, n_tx_blocked
        uint32_t nfan
        int app_rx
        int app_owns_rx
        int app_busy
        int64_t app_seen_ns
        int64_t blind_max_ns
        uint64_t n_app_signals, n_app_rx_dgrams, n_app_rx_calls, n_app_handoffs, n_app_spins, n_app_rx_empty
        uint64_t n_app_control
        uint32_t yield_batches
        int64_t yield_max_ns
        uint64_t n_app_yields, n_app_lock_waits, n_handover_timeouts, max_app_wait_batches, max_app_lock_wait_ns
    int RP_APP_BUSY_BATCH
    int64_t rp_now_ns()
    int rp_loop_init(rp_loop_t *l, rp_node_t *n, rp_sock_t *mrx, rp_sock_t *uc, uint64_t mcast_addr,
                     uint32_t rx_batch, int busy_poll)
    void rp_loop_free(rp_loop_t *l)
    int rp_loop_once(rp_loop_t *l, int64_t max_wait_ns)
    void rp_loop_run(rp_loop_t *l)
    void rp_loop_wake(rp_loop_t *l)
    int rp_loop_flush(rp_loop_t *l)
    size_t rp_loop_publish(rp_loop_t *l, const uint8_t *payloads, const uint32_t *lens,
                           const uint64_t *labels, size_t count)
    int rp_loop_set_fanout(rp_loop_t *l, const uint64_t *addrs, uint32_t n)
    int rp_loop_set_fanout_locked(rp_loop_t *l, const uint64_t *addrs, uint32_t n)
    int64_t rp_loop_publish1(rp_loop_t *l, const uint8_t *payload, uint32_t length, uint64_t label)
    uint64_t rp_loop_app_wait(rp_loop_t *l, int64_t timeout_ns, int64_t spin_ns)
    void rp_loop_close_waiters(rp_loop_t *l)
    int64_t rp_loop_publish_ext(rp_loop_t *l, const uint8_t *payload, uint64_t length, uint64_t label,
                                uint32_t stream)
    size_t rp_loop_publish_batch_ext(rp_loop_t *l, const uint8_t *payloads, const uint32_t *lens,
                                     const uint64_t *labels, size_t count, uint32_t stream)
    void rp_loop_lock(rp_loop_t *l)
    void rp_loop_unlock(rp_loop_t *l)
    void rp_loop_lock_app(rp_loop_t *l)


cdef extern from "flowack.h" nogil:
    int rp_flowack_init(rp_flowack_t *f, uint64_t limit, uint32_t every, int64_t stale_ns, int64_t resend_ns)
    void rp_flowack_set_bytes(rp_flowack_t *f, uint64_t limit_bytes)
    void rp_flowack_arm_bytes(rp_flowack_t *f, const rp_node_t *n)
    void rp_flowack_free(rp_flowack_t *f)
    int rp_flowack_set_members(rp_flowack_t *f, const uint32_t *ids, const uint32_t *incs,
                               const uint64_t *addrs, const uint8_t *counts, uint32_t n, int64_t now)
    void rp_flowack_update(rp_flowack_t *f, const rp_node_t *n, int64_t now)
    int rp_flowack_after_batch(rp_node_t *n, int drained, int64_t now)
    int rp_flowack_after_take(rp_node_t *n, int64_t now)
    enum:
        RP_FLOWACK_MOVED
        RP_FLOWACK_QUEUED
    uint64_t rp_flowack_room(const rp_flowack_t *f, const rp_node_t *n)
    uint64_t rp_flowack_bytes_out(const rp_flowack_t *f, const rp_node_t *n)

cdef extern from "auth.h" nogil:
    # replay.h, through the keyed node's auth context
    ctypedef struct rp_replay_t:
        uint32_t cap, n
        uint64_t accepted, refused, evicted
    void rp_auth_set_encrypt(rp_auth_t *a, int on)
    int rp_auth_encrypting(const rp_auth_t *a)
    uint64_t rp_auth_sealed(const rp_auth_t *a)
    int RP_MAC_OPENSSL
    int RP_MAC_IPSECMB
    int rp_auth_impl(const rp_auth_t *a)
    int rp_auth_impl_available(const rp_auth_t *a, int impl)
    int rp_auth_set_impl(rp_auth_t *a, int impl)
    const char *rp_auth_impl_name(int impl)
    const char *rp_auth_lib_describe()
    const rp_replay_t *rp_auth_replay(const rp_auth_t *a)
    uint64_t rp_auth_arena_full(const rp_auth_t *a)
    int RP_AUTH_SIGNED_TRAILER
    int RP_AUTH_SIG_KEY
    int rp_auth_set_signing(rp_auth_t *a, const uint8_t *priv, uint32_t n, const uint32_t *ids,
                            const uint8_t *pubs)
    int rp_auth_verifying(const rp_auth_t *a)
    int rp_auth_ed25519_public(const uint8_t *priv, uint8_t *pub)
    uint64_t rp_auth_signatures(const rp_auth_t *a)
    void rp_auth_set_replay_skew(rp_auth_t *a, uint64_t ns)
    uint64_t rp_auth_replay_skew(const rp_auth_t *a)
    void rp_auth_set_clock_offset(rp_auth_t *a, int64_t ns)
    uint64_t rp_auth_wall_ns(const rp_auth_t *a)
    uint64_t rp_auth_stale(const rp_auth_t *a)
