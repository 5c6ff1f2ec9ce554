/* Send window: how far a sender may run ahead of the slowest acknowledgment
 * that releases its send buffer (a logger's LOGACK, every receiver's flow
 * report, whatever the release strategy waits for): own messages published
 * but not yet released, next_seq - acked.  Beyond `limit` publish stops
 * (BlockingIOError, a short publish_batch) instead of queueing as much as
 * the store holds -- seconds of backlog at line rate.  When acknowledgments
 * bring the window back under its low-water mark, an eventfd wakes whoever
 * found it closed (a blocking publish, asyncio's writable()).
 *
 * Nothing held (no loggers and flow_control "loggers": acked follows
 * next_seq) means nothing in flight: the window never closes.  All calls
 * with the node lock held, except reading the fd. */
#ifndef RP_SENDWINDOW_H
#define RP_SENDWINDOW_H

#include "flowack.h"
#include "node.h"

#define RP_EWINDOW (-16)   /* publish: the send window is full */

typedef struct {
    uint64_t limit;      /* messages in flight at most (0: no window) */
    int fd;              /* eventfd: readable once the window reopened */
    int waiting;         /* a publish found it closed since the last signal */
    uint64_t n_closed;   /* publish calls (and writability checks) that found it full */
    uint64_t n_opened;   /* signals to waiters */
} rp_sendwin_t;

int  rp_sendwin_init(rp_sendwin_t *w, uint64_t limit);
void rp_sendwin_free(rp_sendwin_t *w);

RP_INLINE uint64_t rp_sendwin_in_flight(const rp_node_t *n) {
    return n->hold_send && n->next_seq > n->acked ? n->next_seq - n->acked : 0;
}

/* How many more messages may be published now (UINT64_MAX: no window):
 * the lesser of this window's room and the flow window's (flowack.h: in
 * flight beyond what the receivers acknowledged in the data plane). */
RP_INLINE uint64_t rp_sendwin_room(const rp_sendwin_t *w, const rp_node_t *n) {
    uint64_t room = rp_flowack_room(n->flowack, n);
    if (!w->limit)
        return room;
    uint64_t f = rp_sendwin_in_flight(n);
    uint64_t r = f >= w->limit ? 0 : w->limit - f;
    return r < room ? r : room;
}

/* A publish wanted more than room: remember a waiter, and clear a stale
 * signal so the waiter sleeps until the window really reopens. */
void rp_sendwin_closed(rp_sendwin_t *w);

/* The windows are open again: a quarter of each free (the wake-up mark:
 * rp_sendwin_poke, rp_loop_wait_room). */
int rp_sendwin_reopened(const rp_sendwin_t *w, const rp_node_t *n);

/* After acknowledgments moved: wake the waiters once a quarter of the
 * window is free again (not at every single message: a waiter woken for
 * one slot would publish one message per wake-up).  Returns 1 if signalled. */
int rp_sendwin_poke(rp_sendwin_t *w, const rp_node_t *n);

/* Wake every waiter whatever the window holds (closing: they return). */
void rp_sendwin_signal(rp_sendwin_t *w);

/* After a receive batch (the loop's one call): queue the flow
 * acknowledgments due (flowack.h) and, when ours moved, wake the waiters.
 * Returns 1 if acknowledgments were queued: the caller sends them at once
 * (a sender waiting on a full window must not wait for the end of the
 * loop's turn, up to 16 batches later). */
int rp_sendwin_after_rx(rp_sendwin_t *w, rp_node_t *n, int drained, int64_t now);

#endif
