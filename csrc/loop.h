/* The I/O loop around one node: sockets in, node, sockets out.
 *
 * rp_loop_once() does one iteration: wait for input (epoll, or not at all
 * when busy-polling), receive batches into the node, and when the node queued
 * control messages, a timer is due or a gap wants an immediate pull, call
 * the control plane back (Python, under the GIL); then send the outbox.  A
 * thread calling it in a loop is the default driver; asyncio calls it from
 * reader callbacks instead.
 *
 * All node access happens under `mu`; the application's publish and receive
 * take it too.  Lock order: mu, then the GIL (the callback takes the GIL while
 * holding mu; the application drops the GIL before taking mu).
 */
#ifndef RP_LOOP_H
#define RP_LOOP_H

#include <pthread.h>

#include "node.h"
#include "sendwindow.h"
#include "udpio.h"

/* Control-plane callback: runs with mu held; returns the next timer (ns). */
typedef int64_t (*rp_control_fn)(void *ctx, int64_t now, int why);
#define RP_WHY_CTL   1
#define RP_WHY_TIMER 2
#define RP_WHY_NACK  4
#define RP_WHY_RX    8      /* a batch arrived (only with every_rx) */

typedef struct {
    rp_node_t *node;
    rp_sock_t *socks[2];     /* multicast receiver (may be NULL), unicast */
    rp_sock_t *tx;           /* the socket we send from (the unicast one) */
    uint64_t mcast_addr;
    uint64_t *fan;           /* unicast fan-out destinations (NULL: multicast) */
    uint32_t nfan, fancap;
    rp_rxbatch_t rx;
    pthread_mutex_t mu;
    int epfd;
    int wake_fd;             /* eventfd: wakes the loop (new timer, stop) */
    int app_fd;              /* eventfd: tells the application deliveries wait */
    int ctl_epfd;            /* epoll on wake_fd only: the loop's wait while the
                              * application thread owns the sockets */
    volatile int stop;
    int busy_poll;
    int every_rx;            /* call control after every received batch (the
                              * engine's driver_needs.every_rx) */
    uint32_t max_batches;    /* receive batches per socket per iteration */
    rp_control_fn control;
    void *ctx;
    int64_t next_timer;
    int64_t sleep_until;     /* when the loop's current wait ends */
    int64_t idle_after_ns;   /* publish arms the idle-heartbeat timer */
    int64_t probe_ns;        /* the tail probe: a HEARTBEAT this long after the
                              * last publish, once per silence (0: none) */
    uint64_t probed;         /* next_seq the last tail probe covered */
    int idle_driven;         /* the idle heartbeat's deadline is the loop's (heartbeats.py
                              * hand_idle_to_driver): last_publish + idle_after_ns, once
                              * per silence -- not a control-plane timer that a stream
                              * moves and that woke the control plane every idle_after
                              * for nothing while it lasted */
    uint64_t idle_seq;       /* next_seq the last idle deadline covered */
    int64_t probe_hold;      /* a dense stream: the loop looks for its silence no
                              * earlier than this (probe_look) */
    uint64_t probe_look_seq; /* next_seq when the loop last looked */
    int64_t probe_look_ns;   /* ... and when */
    uint64_t n_probes;
    uint64_t delivered_signal; /* deliveries at the last app signal */
    double drop_rate;        /* in-process loss (tests without root) */
    uint64_t rng;            /* xorshift state for drop_rate */
    uint64_t n_dropped;
    uint64_t n_iter, n_wakeups, n_control, n_tx_blocked;
    rp_sendwin_t win;        /* publish side: the send window */
    uint64_t n_win_waits;    /* rp_loop_wait_room calls that found the window closed */
    uint64_t n_win_rx;       /* socket reads by a publisher waiting for room (its
                              * acknowledgments read by itself, not the loop thread) */
    int64_t win_spin_ns;     /* Config.publish_spin_us: a waiting publisher polls
                              * this long before it sleeps (0: sleeps at once) */
    int win_park;            /* ... and the loop thread (there is one) leaves the
                              * sockets to it between its waits (wait_input) */
    uint64_t n_win_spun;     /* waits for room that ended while spinning (no sleep) */
    volatile int64_t win_seen_ns; /* when the publisher last waited for room or read its
                                   * sockets on a short publish: with win_park the
                                   * loop leaves the sockets to it for 10 x blind_max_ns */
    uint64_t n_win_sleeps;   /* blocking sleeps (ppoll) of waits for room */
    uint64_t n_takes;        /* application takes that took something (rp_loop_after_take):
                              * delivered / n_takes is the receiver's batch per take */
    /* The application thread receives itself (rp_loop_app_wait).  While
     * app_waiting > 0 the loop does not watch the sockets (it sleeps on
     * ctl_epfd, at most blind_max_ns at a time, so it takes the sockets back
     * soon after the application stops waiting).  Every recvmmsg of either
     * thread runs under mu: the kernel hands each datagram to one call and
     * the node sees it once, whoever made the call. */
    int app_rx;              /* the application may receive (Config.app_receive) */
    volatile int closing;    /* rp_loop_close_waiters: waiters return */
    volatile int app_waiting;  /* application threads in rp_loop_app_wait */
    int ctl_pending;         /* control bodies of an application batch wait for
                              * the loop (they point into arx: not reused till then) */
    int64_t blind_max_ns;
    volatile int loop_blind; /* the loop sleeps without watching the sockets */
    int app_busy;            /* the application's receive got a full batch */
    rp_rxbatch_t arx;        /* the application thread's receive batch (lazy) */
    uint32_t arx_cap;
    int arx_gro;
    uint64_t n_app_signals;  /* app_fd writes (a loop -> application hop) */
    uint64_t n_app_rx_dgrams, n_app_rx_calls, n_app_handoffs, n_app_spins;
    uint64_t n_app_rx_empty;  /* the application's recvmmsg that found nothing */
    volatile int app_spinning; /* application threads spinning for a whole wait
                                * (receive_mode "spin"): the loop stays parked
                                * 10 x blind_max_ns at a time (app_keeps_time) */
    uint64_t n_control_ns, max_control_ns;  /* time in control-plane calls (mu held) */
    /* The application's takes against the loop's receive batches (mu is not
     * fair: rp_loop_lock_app).  app_lock_want: application threads blocked
     * on mu in a take; the loop counts its batches meanwhile and after
     * yield_batches of them stops receiving, unlocks and waits (at most
     * yield_max_ns) until one of them got mu (app_lock_got moved). */
    volatile int app_lock_want;
    uint32_t app_lock_got;           /* a futex word: the loop sleeps on it while handing over */
    int loop_handing;                /* the loop sleeps on app_lock_got: wake it */
    uint32_t yield_batches;          /* 0: never yield */
    uint32_t app_wait_batches;       /* batches the loop did while a take waited (mu held) */
    int yielding;                    /* this turn stopped receiving to let a take in */
    int64_t yield_max_ns;
    uint64_t n_app_yields;           /* turns the loop cut short for a waiting take */
    uint64_t n_app_lock_waits;       /* takes that found mu held and waited */
    uint64_t n_handover_timeouts;    /* hand-overs that gave up after yield_max_ns (the take's
                                      * thread was not scheduled: the loop went on receiving) */
    uint64_t max_app_wait_batches;   /* the most loop batches one take waited through */
    uint64_t max_app_lock_wait_ns;   /* the longest a take waited for mu */
    int app_owns_rx;         /* receive_mode "spin": the application thread is
                              * the receiver between its waits too -- the loop
                              * stays parked for 10 x blind_max_ns after the
                              * application last received, unless its last
                              * wait's batch was full (app_busy) */
    volatile int64_t app_seen_ns; /* when the application last received: a
                                   * wait ended, or a take (with app_owns_rx) */
    volatile int app_keeps_time;  /* a spinning wait (receive_mode "spin") runs the
                                   * control plane itself -- its timers, control
                                   * messages and gaps -- instead of waking the loop
                                   * thread onto the CPU it spins on */
    uint64_t n_app_control;       /* control-plane calls run by a spinning wait */
    volatile int64_t app_kept_ns; /* when a spinning wait that kept time last ended: the
                                   * loop leaves the timers to the application for 10 x
                                   * blind_max_ns after (a take without a wait does not
                                   * count: an application that takes and takes again
                                   * never runs them) */
} rp_loop_t;

/* An application receive of this many datagrams or more is a stream, not
 * lone messages: the loop reads the sockets while the application consumes
 * (app_busy). */
#define RP_APP_BUSY_BATCH 8

int64_t rp_now_ns(void);

int  rp_loop_init(rp_loop_t *l, rp_node_t *n, rp_sock_t *mrx, rp_sock_t *uc, uint64_t mcast_addr,
                  uint32_t rx_batch, int busy_poll);
void rp_loop_free(rp_loop_t *l);

/* One iteration, waiting at most max_wait_ns for input (-1: until the next
 * timer).  Call without mu held. */
int rp_loop_once(rp_loop_t *l, int64_t max_wait_ns);

/* Until stop is set. */
void rp_loop_run(rp_loop_t *l);

/* Wake a sleeping loop (new earlier timer, stop). */
void rp_loop_wake(rp_loop_t *l);

/* Send what the outbox holds now (call with mu held). */
int rp_loop_flush(rp_loop_t *l);

/* Publish a batch from the application thread and send it at once.
 * Takes mu.  Returns how many were published: fewer than count when the
 * send window (or the store) is full. */
size_t rp_loop_publish(rp_loop_t *l, const uint8_t *payloads, const uint32_t *lens,
                       const uint64_t *labels, size_t count);

/* The application thread waits for deliveries, receiving from the sockets
 * itself (when app_rx): spin up to spin_ns retrying non-blocking receives,
 * then sleep in poll() on the sockets and app_fd, up to timeout_ns (-1:
 * forever; a signal ends the wait early, so Python can run its handler).
 * spin_ns < 0: spin for the whole wait, never sleeping (the caller bounds
 * timeout_ns so that Python's signal handlers still run).
 * Control messages and gaps in its batch are handed to the loop
 * thread (woken) -- except in a whole-wait spin (receive_mode "spin"),
 * which runs them and the due timers itself, under mu, as the loop thread
 * would (the loop sleeps meanwhile: woken, it would preempt the spinner on
 * its own CPU and the spinner would wait for it).  Returns the deliveries pending (> 0), or 0
 * on timeout.  Call without mu held, from a threaded loop only. */
uint64_t rp_loop_app_wait(rp_loop_t *l, int64_t timeout_ns, int64_t spin_ns);

/* The control plane's calls so far: total and longest time (ns) each held
 * mu -- how long a receive may have waited for the node. */
void rp_loop_control_time(const rp_loop_t *l, uint64_t *total_ns, uint64_t *max_ns);

/* Closing: every rp_loop_app_wait returns now, and later ones at once. */
void rp_loop_close_waiters(rp_loop_t *l);

/* The node lock, for the application's calls into the node. */
void rp_loop_lock(rp_loop_t *l);
void rp_loop_unlock(rp_loop_t *l);
/* The same for an application's take of deliveries: a take that has to
 * wait is announced to the loop, which lets it in within yield_batches
 * receive batches (a torrent of full batches -- 1 MB messages on loopback --
 * would otherwise keep retaking the unfair mutex for 0.1 s and more while
 * the reassembled messages wait).  Unlock with rp_loop_unlock. */
void rp_loop_lock_app(rp_loop_t *l);

/* Publish one message and send it; returns its seq or a negative error
 * (RP_EWINDOW: the send window is full). */
int64_t rp_loop_publish1(rp_loop_t *l, const uint8_t *payload, uint32_t len, uint64_t label);

/* The same on a stream, of any size up to the node's max_message (a large
 * message goes out as fragments: node.h rp_node_publish_ext); and a batch. */
int64_t rp_loop_publish_ext(rp_loop_t *l, const uint8_t *payload, uint64_t len, uint64_t label,
                            uint32_t stream);
size_t rp_loop_publish_batch_ext(rp_loop_t *l, const uint8_t *payloads, const uint32_t *lens,
                                 const uint64_t *labels, size_t count, uint32_t stream);

/* Replace the unicast fan-out list (NULL/0: use multicast).  Takes mu;
 * the _locked form is for callers already holding it (the control plane). */
int rp_loop_set_fanout(rp_loop_t *l, const uint64_t *addrs, uint32_t n);
int rp_loop_set_fanout_locked(rp_loop_t *l, const uint64_t *addrs, uint32_t n);

/* The send window (publish side): its state, and setting its limit
 * (messages in flight beyond the slowest acknowledgment; 0: none). */
rp_sendwin_t *rp_loop_window(rp_loop_t *l);
void rp_loop_set_window(rp_loop_t *l, uint64_t limit);
/* After the control plane ran (mu held): wake a publisher waiting for the
 * window if acknowledgments reopened it. */
int rp_loop_window_poke(rp_loop_t *l);
/* The publisher waits for room in the windows (at most timeout_ns; -1:
 * forever), reading the sockets itself while it waits (when own and the
 * application may receive, Config.app_receive): the acknowledgment that
 * reopens the window wakes this thread directly -- no hop through the loop
 * thread and the window's eventfd, two thread wake-ups per window turn on
 * cores the receivers share.  Control messages it reads go to the loop
 * thread, as in rp_loop_app_wait.  Returns the room now (0: the timeout
 * passed, or closing; UINT64_MAX: no window).  Once a quarter of each
 * window is free (rp_sendwin_reopened) it returns.  Call without mu held,
 * from a threaded loop only. */
uint64_t rp_loop_wait_room(rp_loop_t *l, int64_t timeout_ns, int own);
/* Its counters: waits that found the window closed, socket reads that
 * found acknowledgments (by a waiting or a short publish). */
void rp_loop_window_counts(const rp_loop_t *l, uint64_t *waits, uint64_t *rx);
/* The publisher's bounded spin (Config.publish_spin_us): a wait for room
 * first polls the sockets and the window's eventfd without blocking for up
 * to spin_ns, then sleeps -- a publisher with a core of its own sees the
 * acknowledgment that reopens the window without a sleep and a wake-up per
 * window turn.  park (only with a loop thread: a node driven by
 * rp_loop_once alone must watch its sockets when it waits): the loop
 * leaves the sockets to the publisher for 10 x blind_max_ns after it last
 * waited for room or read them.  Its counters: waits that ended while
 * spinning, and the sleeps of all waits. */
void rp_loop_set_publish_spin(rp_loop_t *l, int64_t spin_ns, int park);
void rp_loop_window_spin_counts(const rp_loop_t *l, uint64_t *spun, uint64_t *sleeps);
/* Application takes that took something (what a window turn costs the
 * receiver: messages per take). */
uint64_t rp_loop_take_count(const rp_loop_t *l);

/* After the application took deliveries (mu held): send the flow
 * acknowledgments now due (flowack.h). */
void rp_loop_after_take(rp_loop_t *l);

/* A take that found nothing while the sockets are the application's
 * (receive_mode "spin", mu held): read them now, without waiting -- the
 * loop does not look while the application owns them, and an application
 * that only takes would otherwise never see what arrived.  Returns the
 * datagrams read. */
int rp_loop_app_poll(rp_loop_t *l);

#endif
