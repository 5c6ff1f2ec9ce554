#define _GNU_SOURCE
#include "loop.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <linux/futex.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int64_t rp_now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int rp_loop_init(rp_loop_t *l, rp_node_t *n, rp_sock_t *mrx, rp_sock_t *uc, uint64_t mcast_addr,
                 uint32_t rx_batch, int busy_poll) {
    memset(l, 0, sizeof(*l));
    l->node = n;
    l->socks[0] = mrx;
    l->socks[1] = uc;
    l->tx = uc;
    l->mcast_addr = mcast_addr;
    l->busy_poll = busy_poll;
    l->max_batches = 16;
    l->next_timer = INT64_MAX;
    l->epfd = l->wake_fd = l->app_fd = l->ctl_epfd = -1;
    l->win.fd = -1;
    l->blind_max_ns = 1000000;
    l->yield_batches = 2;
    l->yield_max_ns = 2000000;
    l->arx_cap = rx_batch;
    int gro = (mrx && mrx->gro) || (uc && uc->gro);
    l->arx_gro = gro;
    if (rp_rx_init(&l->rx, rx_batch, gro))
        return RP_ENOMEM;
    if (pthread_mutex_init(&l->mu, NULL)) {
        rp_rx_free(&l->rx);
        return RP_ENOMEM;
    }
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    l->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    l->app_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    rp_sendwin_init(&l->win, 0);
    l->ctl_epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0 || l->wake_fd < 0 || l->app_fd < 0 || l->win.fd < 0 || l->ctl_epfd < 0) {
        int e = -errno;
        rp_loop_free(l);
        return e;
    }
    struct epoll_event ev = {.events = EPOLLIN};
    for (int k = 0; k < 2; k++) {
        if (!l->socks[k])
            continue;
        ev.data.u32 = (uint32_t)k;
        if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->socks[k]->fd, &ev) < 0) {
            int e = -errno;
            rp_loop_free(l);
            return e;
        }
    }
    ev.data.u32 = 2;
    epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->wake_fd, &ev);
    epoll_ctl(l->ctl_epfd, EPOLL_CTL_ADD, l->wake_fd, &ev);
    return RP_OK;
}

void rp_loop_free(rp_loop_t *l) {
    if (l->epfd >= 0) close(l->epfd);
    if (l->wake_fd >= 0) close(l->wake_fd);
    if (l->app_fd >= 0) close(l->app_fd);
    if (l->ctl_epfd >= 0) close(l->ctl_epfd);
    l->epfd = l->wake_fd = l->app_fd = l->ctl_epfd = -1;
    rp_sendwin_free(&l->win);
    rp_rx_free(&l->rx);
    rp_rx_free(&l->arx);
    free(l->fan);
    l->fan = NULL;
    pthread_mutex_destroy(&l->mu);
}

void rp_loop_wake(rp_loop_t *l) {
    uint64_t one = 1;
    ssize_t r = write(l->wake_fd, &one, sizeof(one));
    (void)r;
}

int rp_loop_flush(rp_loop_t *l) {
    rp_outbox_t *o = &l->node->out;
    rp_out_flush(o);
    if (!o->n)
        return 0;
    size_t consumed = 0;
    int r = rp_sock_send(l->tx, o, l->mcast_addr, l->nfan ? l->fan : NULL, l->nfan, &consumed);
    if (consumed >= o->n)
        rp_out_clear(o);
    else {
        rp_out_consume(o, consumed);
        l->n_tx_blocked++;
    }
    return r;
}

/* Tell a waiting application that deliveries are there. */
static void signal_app(rp_loop_t *l) {
    uint64_t d = l->node->store.head;   /* anything stored since last time */
    if (d != l->delivered_signal && rp_node_pending(l->node)) {
        l->delivered_signal = d;
        l->n_app_signals++;
        uint64_t one = 1;
        ssize_t r = write(l->app_fd, &one, sizeof(one));
        (void)r;
    }
}

static void drain_wake(rp_loop_t *l) {
    uint64_t v;
    ssize_t r = read(l->wake_fd, &v, sizeof(v));
    (void)r;
}

/* xorshift64*: the in-process drop filter's coin. */
static int drop(rp_loop_t *l) {
    uint64_t x = l->rng ? l->rng : 0x9E3779B97F4A7C15ULL;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    l->rng = x;
    return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) * (1.0 / 9007199254740992.0) < l->drop_rate;
}

/* The tail probe (rpbcast.protocol.heartbeats): one HEARTBEAT probe_ns
 * after the last publish, once per silence, sent in C by whichever thread
 * is awake then -- the application waiting for an answer, or the loop: no
 * control-plane call, and no wake-up of the other thread per publish. */
static int64_t probe_due(const rp_loop_t *l) {
    const rp_node_t *n = l->node;
    if (!l->probe_ns || !n->next_seq || l->probed == n->next_seq)
        return INT64_MAX;
    int64_t due = n->last_publish + l->probe_ns;
    return due > l->probe_hold ? due : l->probe_hold;
}

/* A dense stream is its own tail probe: its next message, microseconds
 * later, shows a receiver the loss of this one.  Yet a loop that looked for
 * its silence every probe_ns woke that often while it lasted -- at 100 k
 * msgs/s one wake-up per 20 messages, each preempting the publisher on its
 * CPU.  So once a look finds RP_PROBE_DENSE publishes since the last one and
 * the stream still going, the next look is RP_PROBE_BACKOFF x probe_ns
 * later: the probe of a dense stream's last message goes out at most that
 * much later than a sparse stream's (a ping-pong, a trickle: unchanged). */
#define RP_PROBE_DENSE 8
#define RP_PROBE_BACKOFF 4
static void probe_look(rp_loop_t *l, int64_t now) {     /* mu held, the loop thread */
    const rp_node_t *n = l->node;
    if (!l->probe_ns || now < l->probe_hold)
        return;
    /* dense: RP_PROBE_DENSE publishes or more per probe_ns since the last
     * look (a rate: a loop that looked seldom must not take a ping-pong's
     * dozen messages over milliseconds for a stream) */
    uint64_t since = n->next_seq - l->probe_look_seq;
    int64_t span = now - l->probe_look_ns;
    l->probe_look_seq = n->next_seq;
    l->probe_look_ns = now;
    int going = now - n->last_publish < l->probe_ns;
    int dense = span > 0 && (double)since * (double)l->probe_ns >= (double)RP_PROBE_DENSE * (double)span;
    /* (a spinning application probes for itself, at no wake-up's cost) */
    l->probe_hold = dense && going && !l->app_keeps_time ? now + RP_PROBE_BACKOFF * l->probe_ns : 0;
}

static int probe(rp_loop_t *l, int64_t now) {      /* mu held */
    if (now < probe_due(l))
        return 0;
    l->probed = l->node->next_seq;
    if (rp_node_send_heartbeat(l->node, 0) <= 0)
        return 0;
    l->n_probes++;
    return 1;
}

/* The idle heartbeat's deadline, when the loop keeps it (idle_driven):
 * idle_after after the last publish, once per silence. */
static int64_t idle_due(const rp_loop_t *l) {
    const rp_node_t *n = l->node;
    if (!l->idle_driven || !n->next_seq || l->idle_seq == n->next_seq)
        return INT64_MAX;
    return n->last_publish + l->idle_after_ns;
}

/* When the control plane is next due for a timer: its own, or the idle
 * heartbeat's. */
static int64_t timer_due(const rp_loop_t *l) {
    int64_t t = idle_due(l);
    return l->next_timer < t ? l->next_timer : t;
}

/* A control call for the timers at `now` (mu held): the silence it covers
 * is announced (the control plane's heartbeats send the idle heartbeat). */
static int64_t run_timers(rp_loop_t *l, int64_t now, int why);

/* Wait for input until the next timer is due (at most max_wait_ns, and
 * 100 ms); ready[k] marks socket k (2: the wake eventfd).  A busy-polling
 * loop does not wait.  While the application thread waits on the sockets
 * the loop leaves them to it (two threads woken for one datagram contend for
 * mu): it waits on its eventfd alone, at most blind_max_ns, then looks again. */
static void wait_input(rp_loop_t *l, int64_t max_wait_ns, int ready[3]) {
    int64_t now = rp_now_ns();
    if (l->busy_poll) {
        ready[0] = ready[1] = 1;
        return;
    }
    /* receive_mode "spin" (app_owns_rx): between two waits the application
     * is taking what it read and is back within microseconds; a loop that
     * watched the sockets then was woken per datagram for nothing, on the
     * core the application spins on (one wake-up per message at 100 k
     * msgs/s).  So the sockets stay the application's for 10 x blind_max_ns
     * (as long as a spinning wait leaves them) after it last received (a wait or a take: an application that finds
     * messages waiting takes without waiting) -- unless its last batch was
     * full (app_busy: a
     * stream, the loop reads meanwhile); an application away longer (busy,
     * or no longer receiving) has them read by the loop again. */
    int64_t away = now - l->app_seen_ns;
    if (away < 0)
        away = 0;       /* it received after `now` was read */
    int64_t owned_for = 10 * l->blind_max_ns;
    int owned = l->app_owns_rx && !l->app_busy && l->app_waiting == 0 && away < owned_for;
    /* Config.publish_spin_us: a publisher that spins on the window reads its
     * acknowledgments itself, in its waits and in each short publish
     * (room_after_acks).  A loop that watched the sockets between its waits
     * was woken per FLOWACK, and one blind for blind_max_ns per 1 ms of a
     * wait, on the core the publisher spins on: each wake-up preempted it
     * (as many involuntary switches of the publisher as loop wake-ups).  So
     * the sockets stay the publisher's for 10 x blind_max_ns after it last
     * waited for room or read them; the loop still runs its timers and the
     * control messages the publisher hands it (a wake-up). */
    int64_t pub_away = now - l->win_seen_ns;
    if (pub_away < 0)
        pub_away = 0;
    int pub_owned = l->win_park && (l->app_waiting > 0 || pub_away < owned_for);
    int blind = l->app_rx && (l->app_waiting > 0 || owned || pub_owned);
    /* blind: a waiting receiver probes, a publisher waiting for room has
     * acknowledgments coming; a publisher between its waits is no reason
     * to hold the tail probe back */
    int64_t due = blind && (!pub_owned || l->app_waiting > 0) ? INT64_MAX : probe_due(l);
    /* a spinning application runs the timers itself (app_keeps_time), or
     * will within microseconds (owned): waking for them here would preempt
     * it on its own CPU -- a control turn every flow_report_interval was
     * the spinner's p99 */
    int64_t kept_away = now - l->app_kept_ns;
    int app_time = l->app_keeps_time > 0 || (owned && kept_away < owned_for);
    int64_t timer = app_time ? INT64_MAX : timer_due(l);
    int64_t wait = (due < timer ? due : timer) - now;
    if (max_wait_ns >= 0 && wait > max_wait_ns)
        wait = max_wait_ns;
    if (wait > 100000000)
        wait = 100000000;   /* wake at least every 100 ms */
    /* a spinning application reads everything and hands control over (a
     * wake-up): the loop looks at the sockets ten times less often -- still
     * every 10 ms, for when the application stops receiving for a while */
    int64_t blind_max = l->app_spinning ? 10 * l->blind_max_ns : l->blind_max_ns;
    if (owned)
        blind_max = owned_for - away;           /* look again when that time is up */
    if (app_time && l->app_keeps_time == 0 && owned_for - kept_away < blind_max)
        blind_max = owned_for - kept_away;      /* its timers are the loop's again then */
    if (pub_owned)
        blind_max = l->app_waiting > 0 ? owned_for : owned_for - pub_away;
    if (blind && wait > blind_max)
        wait = blind_max;
    if (wait < 0)
        wait = 0;
    l->sleep_until = now + wait;
    struct epoll_event evs[4];
    l->loop_blind = blind;
    /* epoll_pwait2: timers below a millisecond (the tail probe) fire on time */
    struct timespec ts = {.tv_sec = wait / 1000000000, .tv_nsec = wait % 1000000000};
    int fd = blind ? l->ctl_epfd : l->epfd;
    int k = epoll_pwait2(fd, evs, 4, &ts, NULL);
    if (k < 0 && errno == ENOSYS)
        k = epoll_wait(fd, evs, 4, (int)((wait + 999999) / 1000000));
    l->loop_blind = 0;
    l->n_wakeups++;
    for (int i = 0; i < k; i++)
        if (evs[i].data.u32 < 3)
            ready[evs[i].data.u32] = 1;
    if (ready[2])
        drain_wake(l);
}

/* Kernel receive timestamps (SO_TIMESTAMPNS) are CLOCK_REALTIME; the
 * engine's clock is CLOCK_MONOTONIC.  The offset moves them onto the
 * engine's timeline so timers, liveness and rx_time never mix the two. */
static int64_t realtime_offset(const rp_loop_t *l, int64_t now) {
    if (!(l->socks[0] && l->socks[0]->timestamps) && !(l->socks[1] && l->socks[1]->timestamps))
        return 0;
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (int64_t)t.tv_sec * 1000000000LL + t.tv_nsec - now;
}

/* The batch just received goes into the node (less the in-process drops). */
static void rx_into_node(rp_loop_t *l, rp_rxbatch_t *b, int64_t now, int64_t real_minus_mono) {
    for (uint32_t i = 0; i < b->n; i++) {
        if (l->drop_rate > 0 && drop(l)) {
            l->n_dropped++;
            continue;
        }
        int64_t at = now;
        if (b->ts[i]) {
            at = b->ts[i] - real_minus_mono;
            if (at > now)
                at = now;       /* the two clocks were read apart */
        }
        rp_node_rx(l->node, b->mem + b->off[i], b->len[i], b->src[i], at);
    }
    if (rp_sendwin_after_rx(&l->win, l->node, b->n < b->cap, now))
        rp_loop_flush(l);               /* flow acknowledgments: a sender may be waiting */
}

/* The control plane (Python, under the GIL), timed: its calls hold mu, so
 * their length is how long a receive may wait for the node. */
static int64_t run_control(rp_loop_t *l, int64_t now, int why) {
    int64_t t = l->control(l->ctx, now, why);
    uint64_t d = (uint64_t)(rp_now_ns() - now);
    l->n_control++;
    l->n_control_ns += d;
    if (d > l->max_control_ns)
        l->max_control_ns = d;
    return t;
}

static int64_t run_timers(rp_loop_t *l, int64_t now, int why) {
    if ((why & RP_WHY_TIMER) && now >= idle_due(l))
        l->idle_seq = l->node->next_seq;
    return run_control(l, now, why);
}

/* ---- The application's takes against the loop's batches ----
 * mu is a plain pthread mutex: not fair.  Under a torrent of full batches
 * the loop unlocks at the end of its turn and locks again at once, before
 * the application thread woken by the unlock runs, for turn after turn
 * (0.1-0.2 s seen with 1 MB messages on loopback): whole messages wait,
 * the reassembly buffers of messages not taken pile up (each a fresh 1 MB
 * allocation with its page faults: the loop thread slows down and the
 * socket overflows).  So a take that has to wait says so (app_lock_want),
 * and once the loop has done yield_batches batches since, it ends its turn
 * and waits -- without mu, at most yield_max_ns -- until the take got it. */

/* After a receive batch (mu held): end the turn here to let a take in? */
static int yield_due(rp_loop_t *l) {
    if (!__atomic_load_n(&l->app_lock_want, __ATOMIC_ACQUIRE) || !l->yield_batches)
        return 0;
    if (++l->app_wait_batches < l->yield_batches)
        return 0;
    if (!l->yielding)
        l->n_app_yields++;
    l->yielding = 1;
    return 1;
}

/* After the turn (mu released): wait for the take to get mu, not relock
 * before it.  Asleep on a futex, not spinning: on a loaded machine the
 * take's thread may need this very CPU to run.  got: app_lock_got when
 * the turn ended. */
static void hand_over(rp_loop_t *l, uint32_t got) {
    __atomic_store_n(&l->loop_handing, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&l->app_lock_want, __ATOMIC_SEQ_CST) &&
        __atomic_load_n(&l->app_lock_got, __ATOMIC_SEQ_CST) == got) {
        struct timespec ts = {.tv_sec = l->yield_max_ns / 1000000000, .tv_nsec = l->yield_max_ns % 1000000000};
        long r = syscall(SYS_futex, &l->app_lock_got, FUTEX_WAIT_PRIVATE, got, &ts, NULL, 0);
        if (r < 0 && errno == ETIMEDOUT)
            __atomic_add_fetch(&l->n_handover_timeouts, 1, __ATOMIC_RELAXED);
    }
    __atomic_store_n(&l->loop_handing, 0, __ATOMIC_SEQ_CST);
}

void rp_loop_lock_app(rp_loop_t *l) {
    if (pthread_mutex_trylock(&l->mu) == 0) {
        l->app_wait_batches = 0;
        return;
    }
    int64_t t0 = rp_now_ns();
    __atomic_add_fetch(&l->app_lock_want, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(&l->mu);
    __atomic_sub_fetch(&l->app_lock_want, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&l->app_lock_got, 1, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&l->loop_handing, __ATOMIC_SEQ_CST))
        syscall(SYS_futex, &l->app_lock_got, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
    uint64_t d = (uint64_t)(rp_now_ns() - t0);
    l->n_app_lock_waits++;
    if (d > l->max_app_lock_wait_ns)
        l->max_app_lock_wait_ns = d;
    if (l->app_wait_batches > l->max_app_wait_batches)
        l->max_app_wait_batches = l->app_wait_batches;
    l->app_wait_batches = 0;
}

/* Receive up to max_batches batches from socket k.  Returns datagrams.
 * Each batch is stamped with a clock read after its recvmmsg returned: a
 * datagram cannot have arrived later than that.  One reading reused for
 * several batches (or taken before the node mutex, which the application
 * may hold for a while) stamped receipts before their send, by as much as
 * the control plane or the mutex took (360 ms seen). */
static int rx_socket(rp_loop_t *l, int k, int64_t real_minus_mono) {
    rp_node_t *n = l->node;
    int got = 0;
    for (uint32_t b = 0; b < l->max_batches; b++) {
        int r = rp_sock_recv(l->socks[k], &l->rx);
        if (r <= 0)
            break;
        got += r;
        int64_t now = rp_now_ns();
        rx_into_node(l, &l->rx, now, real_minus_mono);
        /* Control bodies point into the receive buffers: hand them over
         * before the next batch reuses them. */
        if ((n->nctl || l->every_rx || n->nretired) && l->control) {   /* (retired: node.h) */
            l->next_timer = run_control(l, now, (n->nctl ? RP_WHY_CTL : 0) | RP_WHY_RX |
                                                (n->nack_pending ? RP_WHY_NACK : 0));
        }
        if (yield_due(l) || (uint32_t)r < l->rx.cap)
            break;
    }
    return got;
}

int rp_loop_once(rp_loop_t *l, int64_t max_wait_ns) {
    int ready[3] = {0, 0, 0};
    wait_input(l, max_wait_ns, ready);
    l->n_iter++;
    pthread_mutex_lock(&l->mu);
    l->sleep_until = 0;
    rp_node_t *n = l->node;
    int64_t real_minus_mono = realtime_offset(l, rp_now_ns());
    int got = 0;
    if (l->ctl_pending && l->control) {
        /* control messages the application thread received (their bodies
         * in arx, which it does not reuse until this is done) */
        l->next_timer = run_control(l, rp_now_ns(), RP_WHY_CTL | (n->nack_pending ? RP_WHY_NACK : 0));
    }
    int resume_app = l->ctl_pending;
    l->ctl_pending = 0;
    for (int k = 0; k < 2 && !l->yielding; k++)
        if (ready[k] && l->socks[k])
            got += rx_socket(l, k, real_minus_mono);
    int64_t now = rp_now_ns();          /* after the receive work: timers are judged now */
    if (l->control && !l->app_keeps_time && (now >= timer_due(l) || n->nack_pending)) {
        int why = (now >= timer_due(l) ? RP_WHY_TIMER : 0) | (n->nack_pending ? RP_WHY_NACK : 0);
        l->next_timer = run_timers(l, now, why);
    }
    probe_look(l, now);
    probe(l, now);
    rp_loop_flush(l);
    if (got)
        signal_app(l);
    if (resume_app) {
        /* the application waits on app_fd alone while its control messages
         * are pending: now it may watch the sockets again */
        l->n_app_signals++;
        uint64_t one = 1;
        ssize_t r = write(l->app_fd, &one, sizeof(one));
        (void)r;
    }
    int yielded = l->yielding;
    uint32_t app_got = l->app_lock_got;
    l->yielding = 0;
    pthread_mutex_unlock(&l->mu);
    if (yielded)
        hand_over(l, app_got);
    return got;
}

void rp_loop_run(rp_loop_t *l) {
    while (!l->stop)
        rp_loop_once(l, -1);
}

/* The application thread keeps the node's time: it spins in a whole wait
 * (app_keeps_time), or it is between two such waits (one ended, and it
 * last received, less than 10 x blind_max_ns ago, and its last batch was
 * not full). */
static int app_has_time(const rp_loop_t *l, int64_t now) {
    if (!l->app_owns_rx)
        return 0;
    if (l->app_keeps_time > 0)
        return 1;
    int64_t owned_for = 10 * l->blind_max_ns;
    return !l->app_busy && l->app_waiting == 0 && now - l->app_seen_ns < owned_for &&
           now - l->app_kept_ns < owned_for;
}

/* After a publish (mu held): send it now, and make sure the loop is awake
 * when the idle heartbeat (idle_after from now) and the tail probe fall due. */
static void after_publish(rp_loop_t *l, int64_t now) {
    rp_loop_flush(l);
    if (!l->idle_driven) {
        int64_t t = now + l->idle_after_ns;
        if (t < l->next_timer)
            l->next_timer = t;
    }
    int64_t by = timer_due(l);
    /* the tail probe: unless the application waits (it probes), a loop
     * asleep past it wakes -- once: it then sleeps until the probe */
    int64_t pd = now + l->probe_ns;
    if (pd < l->probe_hold)
        pd = l->probe_hold;             /* a dense stream: probe_look */
    if (l->probe_ns && !l->loop_blind && pd < by)
        by = pd;
    if (l->sleep_until <= by)
        return;
    if (app_has_time(l, now)) {
        /* the spinner recomputes its deadline when app_fd is written (a
         * thread other than it published); between its waits it does so
         * when it next waits */
        if (l->app_keeps_time > 0) {
            uint64_t one = 1;
            ssize_t r = write(l->app_fd, &one, sizeof(one));
            (void)r;
        }
        return;
    }
    rp_loop_wake(l);
}

static int app_rx_once(rp_loop_t *l, int mask, int keeps);

/* The publisher reads the sockets in `mask` (mu held), for the
 * acknowledgments in them.  Deliveries it read for a receiving thread of
 * this node are signalled (app_rx_once tells the loop not to): that thread
 * may have looked at the sockets just before this one emptied them. */
static int publisher_rx(rp_loop_t *l, int mask) {
    rp_node_t *n = l->node;
    uint64_t head = n->store.head;
    int got = app_rx_once(l, mask, 0);
    if (got <= 0)
        return 0;
    l->n_win_rx++;
    if (n->store.head != head && rp_node_pending(n)) {
        uint64_t one = 1;
        ssize_t r = write(l->app_fd, &one, sizeof(one));
        (void)r;
    }
    return got;
}

/* A publish that found the window short (mu held): read the acknowledgments
 * already in the unicast socket before refusing -- the loop thread may not
 * have run since they arrived (it shares the cores with this one and the
 * receivers), and a refusal costs the publisher a wait. */
static uint64_t room_after_acks(rp_loop_t *l) {
    uint64_t room = rp_sendwin_room(&l->win, l->node);
    if (l->app_rx && !l->ctl_pending && !l->closing && l->node->flowack && l->socks[1]) {
        if (publisher_rx(l, 1 << 1))
            room = rp_sendwin_room(&l->win, l->node);
        l->win_seen_ns = rp_now_ns();   /* the publisher reads its sockets (wait_input) */
    }
    return room;
}

size_t rp_loop_publish(rp_loop_t *l, const uint8_t *payloads, const uint32_t *lens,
                       const uint64_t *labels, size_t count) {
    return rp_loop_publish_batch_ext(l, payloads, lens, labels, count, 0);
}

int64_t rp_loop_publish1(rp_loop_t *l, const uint8_t *payload, uint32_t len, uint64_t label) {
    return rp_loop_publish_ext(l, payload, len, label, 0);
}

rp_sendwin_t *rp_loop_window(rp_loop_t *l) { return &l->win; }

void rp_loop_set_window(rp_loop_t *l, uint64_t limit) {
    pthread_mutex_lock(&l->mu);
    l->win.limit = limit;
    rp_sendwin_poke(&l->win, l->node);
    pthread_mutex_unlock(&l->mu);
}

int rp_loop_window_poke(rp_loop_t *l) { return rp_sendwin_poke(&l->win, l->node); }

/* After the application took deliveries (mu held): the flow window's
 * frontier is what the application has taken, so its acknowledgments are
 * due here -- sent now, by this thread: a sender waiting on a full window
 * is woken by them, not by the loop's next turn. */
void rp_loop_after_take(rp_loop_t *l) {
    l->n_takes++;
    if (l->node->flowack && rp_flowack_after_take(l->node, rp_now_ns()))
        rp_loop_flush(l);
}

/* Streams and large messages (rp_node_publish_ext): the window is checked per
 * message, not per fragment -- a message larger than the window still goes
 * once there is room, so the window is exceeded by at most one message. */
int64_t rp_loop_publish_ext(rp_loop_t *l, const uint8_t *payload, uint64_t len, uint64_t label,
                            uint32_t stream) {
    pthread_mutex_lock(&l->mu);
    if (!rp_sendwin_room(&l->win, l->node)) {
        rp_sendwin_closed(&l->win);
        pthread_mutex_unlock(&l->mu);
        return RP_EWINDOW;
    }
    int64_t now = rp_now_ns();
    int64_t seq = rp_node_publish_ext(l->node, payload, len, label, stream, now);
    if (seq >= 0)
        after_publish(l, now);
    pthread_mutex_unlock(&l->mu);
    return seq;
}

size_t rp_loop_publish_batch_ext(rp_loop_t *l, const uint8_t *payloads, const uint32_t *lens,
                                 const uint64_t *labels, size_t count, uint32_t stream) {
    pthread_mutex_lock(&l->mu);
    int64_t now = rp_now_ns();
    uint64_t room = rp_sendwin_room(&l->win, l->node);
    size_t fit = rp_flowack_fit(l->node->flowack, l->node, lens, count);
    if (count > room || fit < count) {
        room = room_after_acks(l);
        fit = rp_flowack_fit(l->node->flowack, l->node, lens, count);
    }
    if (count > room || fit < count) {
        count = (size_t)(room < fit ? room : fit);
        rp_sendwin_closed(&l->win);
    }
    size_t k = count ? rp_node_publish_batch_ext(l->node, payloads, lens, labels, count, stream, now) : 0;
    if (k)
        after_publish(l, now);
    pthread_mutex_unlock(&l->mu);
    return k;
}

int rp_loop_set_fanout_locked(rp_loop_t *l, const uint64_t *addrs, uint32_t n) {
    if (n > l->fancap) {
        uint64_t *f = (uint64_t *)realloc(l->fan, n * sizeof(uint64_t));
        if (!f)
            return RP_ENOMEM;
        l->fan = f;
        l->fancap = n;
    }
    if (n)
        memcpy(l->fan, addrs, n * sizeof(uint64_t));
    l->nfan = n;
    return RP_OK;
}

int rp_loop_set_fanout(rp_loop_t *l, const uint64_t *addrs, uint32_t n) {
    pthread_mutex_lock(&l->mu);
    int rc = rp_loop_set_fanout_locked(l, addrs, n);
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int rp_loop_app_poll(rp_loop_t *l) {
    if (!l->app_rx || l->closing)
        return 0;
    return app_rx_once(l, 3, 0);
}

void rp_loop_lock(rp_loop_t *l) { pthread_mutex_lock(&l->mu); }
void rp_loop_unlock(rp_loop_t *l) { pthread_mutex_unlock(&l->mu); }

/* The application thread's receive (mu held): what the sockets hold now into
 * the node.  A batch with control messages or a new gap stops it and wakes the
 * loop thread, which runs the control plane (Python) off this thread's path --
 * unless `keeps`: the spinning wait that called runs them itself next, and
 * one that keeps time while another thread reads is told through app_fd. */
static int app_rx_once(rp_loop_t *l, int mask, int keeps) {
    rp_node_t *n = l->node;
    if (l->ctl_pending)
        return 0;
    if (!l->arx.mem && rp_rx_init(&l->arx, l->arx_cap, l->arx_gro))
        return 0;       /* no memory: the loop thread keeps receiving */
    int64_t real_minus_mono = realtime_offset(l, rp_now_ns());
    int got = 0, handoff = 0;
    for (int k = 0; k < 2 && !handoff; k++) {
        if (!l->socks[k] || !(mask & (1 << k)))
            continue;
        for (uint32_t b = 0; b < l->max_batches; b++) {
            int r = rp_sock_recv(l->socks[k], &l->arx);
            if (r == 0 && b == 0)
                l->n_app_rx_empty++;
            if (r <= 0)
                break;
            got += r;
            l->n_app_rx_calls++;
            rx_into_node(l, &l->arx, rp_now_ns(), real_minus_mono);
            if (n->nctl)
                l->ctl_pending = 1;
            if (n->nctl || n->nack_pending) {
                handoff = 1;
                break;
            }
            if ((uint32_t)r < l->arx.cap)
                break;
        }
    }
    l->n_app_rx_dgrams += (uint64_t)got;
    if (got >= RP_APP_BUSY_BATCH)
        l->app_busy = 1;        /* a stream, not a lone message: more is coming */
    l->delivered_signal = n->store.head;    /* the loop need not signal these */
    if (handoff && !keeps) {
        l->n_app_handoffs++;
        if (l->app_keeps_time > 0) {
            /* a spinning wait keeps time (not this thread: a publisher
             * reading its acknowledgments): it runs them when it looks */
            uint64_t one = 1;
            ssize_t r = write(l->app_fd, &one, sizeof(one));
            (void)r;
        } else {
            rp_loop_wake(l);
        }
    }
    if (got)
        rp_loop_flush(l);
    return got;
}

/* The descriptors a waiting application thread polls: `fd` first, then,
 * when it reads the sockets itself, each socket (sock_of[i]: which one). */
static int watch_set(const rp_loop_t *l, int fd, int socks, struct pollfd *p, int *sock_of) {
    int np = 0;
    sock_of[np] = -1;
    p[np].fd = fd;
    p[np++].events = POLLIN;
    if (socks)
        for (int k = 0; k < 2; k++)
            if (l->socks[k]) {
                sock_of[np] = k;
                p[np].fd = l->socks[k]->fd;
                p[np++].events = POLLIN;
            }
    return np;
}

/* ppoll until `until` (monotonic ns; INT64_MAX: no limit). */
static int ppoll_until(struct pollfd *p, int np, int64_t now, int64_t until) {
    struct timespec ts, *tp = NULL;
    if (until != INT64_MAX) {
        int64_t w = until > now ? until - now : 0;
        ts.tv_sec = w / 1000000000LL;
        ts.tv_nsec = w % 1000000000LL;
        tp = &ts;
    }
    return ppoll(p, (nfds_t)np, tp, NULL);
}

/* Poll without sleeping until something is ready, the loop closes or `stop`
 * (monotonic ns); `spins` (may be NULL) counts the polls. */
static int ppoll_spin(rp_loop_t *l, struct pollfd *p, int np, int64_t stop, uint64_t *spins) {
    struct timespec zero = {0, 0};
    for (;;) {
        if (spins)
            (*spins)++;
        int r = ppoll(p, (nfds_t)np, &zero, NULL);
        if (r != 0 || l->closing || rp_now_ns() >= stop)
            return r;
    }
}

/* Which sockets a ppoll that returned r said are readable (bit k: socket k). */
static int ready_mask(const struct pollfd *p, int np, int r, const int *sock_of) {
    int mask = 0;
    for (int i = 1; r > 0 && i < np; i++)
        if (p[i].revents)
            mask |= 1 << sock_of[i];
    return mask;
}

/* A spinning wait's turn of the control plane (mu held): the control
 * messages and gaps its receive found, slots retired, and the timers that
 * fell due -- what the loop thread would be woken for, run here without a
 * thread switch (the control plane takes the GIL, as in the loop thread). */
static void keep_time(rp_loop_t *l) {
    rp_node_t *n = l->node;
    int64_t now = rp_now_ns();
    int why = (l->ctl_pending ? RP_WHY_CTL : 0) | (n->nack_pending ? RP_WHY_NACK : 0) |
              (now >= timer_due(l) ? RP_WHY_TIMER : 0);
    if (!why && !n->nretired)
        return;
    l->next_timer = run_timers(l, now, why | (n->nretired ? RP_WHY_RX : 0));
    l->ctl_pending = 0;
    l->n_app_control++;
    rp_loop_flush(l);
}

/* Only the sockets ppoll said are readable are read (`mask`, bit k: socket
 * k): a wait costs ppoll + one recvmmsg per message, not a recvmmsg on every
 * socket before and after every sleep (three of four came back empty).  The
 * first look reads nothing: ppoll returns at once for what is already
 * queued.  A spinning wait polls them with a zero timeout, without the
 * node lock, and reads what that shows. */
uint64_t rp_loop_app_wait(rp_loop_t *l, int64_t timeout_ns, int64_t spin_ns) {
    int64_t t0 = rp_now_ns();
    int64_t deadline = timeout_ns < 0 ? INT64_MAX : t0 + timeout_ns;
    int whole = spin_ns < 0;    /* receive_mode "spin" */
    int64_t spin_end = whole ? deadline : t0 + (spin_ns > 0 ? spin_ns : 0);
    int keep = whole && l->app_owns_rx && l->control;     /* runs the control plane itself */
    uint64_t pending = 0;
    int mask = 0;
    if (whole)
        __atomic_add_fetch(&l->app_spinning, 1, __ATOMIC_SEQ_CST);
    if (keep)
        __atomic_add_fetch(&l->app_keeps_time, 1, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&l->app_waiting, 1, __ATOMIC_SEQ_CST);
    l->app_busy = 0;
    for (;;) {
        pthread_mutex_lock(&l->mu);
        int own = l->app_rx && !l->closing;
        if (own && mask)
            app_rx_once(l, mask, keep);
        if (own && keep)
            keep_time(l);
        if (own && probe(l, rp_now_ns()))
            rp_loop_flush(l);
        int64_t due = own ? probe_due(l) : INT64_MAX;
        if (own && keep && timer_due(l) < due)
            due = timer_due(l);
        pending = rp_node_pending(l->node);
        int ctl = l->ctl_pending;
        pthread_mutex_unlock(&l->mu);
        if (pending || l->closing)
            break;
        int64_t now = rp_now_ns();
        if (now >= deadline)
            break;
        struct pollfd p[3];
        int sock_of[3];
        /* with control messages pending the loop's control run signals app_fd */
        int np = watch_set(l, l->app_fd, own && !ctl, p, sock_of);
        int64_t until = due < deadline ? due : deadline;
        int r;
        if (own && now < spin_end) {
            /* Spin: look without the node lock (a spinner that took mu on
             * every turn would starve the loop thread of it: it relocks
             * before the woken loop runs), lock only for what is there. */
            r = ppoll_spin(l, p, np, until < spin_end ? until : spin_end, &l->n_app_spins);
        } else {
            r = ppoll_until(p, np, now, until);
        }
        if (r < 0 && errno == EINTR)
            break;      /* a signal: back to Python, which runs its handler */
        mask = ready_mask(p, np, r, sock_of);
        if (r > 0 && p[0].revents) {
            uint64_t v;
            ssize_t n = read(l->app_fd, &v, sizeof(v));
            (void)n;
        }
    }
    l->app_seen_ns = rp_now_ns();      /* (before app_waiting drops: wait_input reads both) */
    if (keep)
        l->app_kept_ns = l->app_seen_ns;
    __atomic_sub_fetch(&l->app_waiting, 1, __ATOMIC_SEQ_CST);
    if (keep)
        __atomic_sub_fetch(&l->app_keeps_time, 1, __ATOMIC_SEQ_CST);
    if (whole)
        __atomic_sub_fetch(&l->app_spinning, 1, __ATOMIC_SEQ_CST);
    /* Traffic in full batches: this thread now goes off to consume them, so
     * the loop thread must read the sockets meanwhile (not sleep blind for a
     * millisecond) -- two threads in a pipeline, as before, at high rates. */
    if (l->app_busy && l->loop_blind) {
        l->n_app_handoffs++;
        rp_loop_wake(l);
    }
    return pending;
}

void rp_loop_control_time(const rp_loop_t *l, uint64_t *total_ns, uint64_t *max_ns) {
    *total_ns = l->n_control_ns;
    *max_ns = l->max_control_ns;
}

void rp_loop_close_waiters(rp_loop_t *l) {
    l->closing = 1;
    uint64_t one = 1;
    ssize_t r = write(l->app_fd, &one, sizeof(one));
    (void)r;
}

void rp_loop_window_counts(const rp_loop_t *l, uint64_t *waits, uint64_t *rx) {
    *waits = l->n_win_waits;
    *rx = l->n_win_rx;
}

uint64_t rp_loop_take_count(const rp_loop_t *l) { return l->n_takes; }

void rp_loop_set_publish_spin(rp_loop_t *l, int64_t spin_ns, int park) {
    l->win_spin_ns = spin_ns > 0 ? spin_ns : 0;
    l->win_park = l->win_spin_ns && park;
}

void rp_loop_window_spin_counts(const rp_loop_t *l, uint64_t *spun, uint64_t *sleeps) {
    *spun = l->n_win_spun;
    *sleeps = __atomic_load_n(&l->n_win_sleeps, __ATOMIC_RELAXED);
}

/* The publisher's wait for room (loop.h).  Like rp_loop_app_wait it reads
 * only the sockets ppoll said are readable, hands control messages to the
 * loop thread (and then leaves the sockets to it until it ran them), and
 * while it waits the loop thread does not watch the sockets (app_waiting:
 * one thread woken per datagram, not two contending for mu).  For the first
 * win_spin_ns of the wait it polls them (and the window's eventfd) with a
 * zero timeout, without the node lock, instead of sleeping: a publisher on
 * a core of its own then turns the window without a sleep and a wake-up
 * (an acknowledgment every 1,024 messages at 6 M msgs/s: every 170 us). */
uint64_t rp_loop_wait_room(rp_loop_t *l, int64_t timeout_ns, int own) {
    int64_t t0 = rp_now_ns();
    int64_t deadline = timeout_ns < 0 ? INT64_MAX : t0 + timeout_ns;
    int64_t spin_end = l->win_spin_ns ? t0 + l->win_spin_ns : 0;
    own = own && l->app_rx;
    uint64_t room = 0;
    int mask = 0, counted = 0, slept = 0;
    if (own)
        __atomic_add_fetch(&l->app_waiting, 1, __ATOMIC_SEQ_CST);
    for (;;) {
        pthread_mutex_lock(&l->mu);
        rp_node_t *n = l->node;
        if (own && mask && !l->closing)
            publisher_rx(l, mask);
        room = rp_sendwin_room(&l->win, n);
        int open = room && rp_sendwin_reopened(&l->win, n);
        if (!open) {
            if (!counted++)
                l->n_win_waits++;
            if (!l->win.waiting)
                rp_sendwin_closed(&l->win);     /* arm: the control plane's reopening signals */
        } else if (counted && !slept && spin_end) {
            l->n_win_spun++;
        }
        int ctl = l->ctl_pending;
        pthread_mutex_unlock(&l->mu);
        if (open || l->closing)
            break;
        int64_t now = rp_now_ns();
        if (now >= deadline)
            break;
        struct pollfd p[3];
        int sock_of[3];
        int np = watch_set(l, l->win.fd, own && !ctl, p, sock_of);
        /* with control messages pending the loop thread reads the sockets
         * after it ran them: look again soon */
        int64_t until = ctl && now + 200000 < deadline ? now + 200000 : deadline;
        int r;
        if (now < spin_end) {
            r = ppoll_spin(l, p, np, until < spin_end ? until : spin_end, NULL);
        } else {
            slept = 1;
            __atomic_add_fetch(&l->n_win_sleeps, 1, __ATOMIC_RELAXED);
            r = ppoll_until(p, np, now, until);
        }
        if (r < 0 && errno == EINTR)
            break;      /* a signal: back to Python, which runs its handler */
        mask = ready_mask(p, np, r, sock_of);
    }
    /* (the loop thread, blind meanwhile, looks at the sockets again within
     * blind_max_ns -- 10 x that with publish_spin_us; not woken here: a
     * wake-up per window turn is the hop this wait saves, and the next short
     * publish reads the acks itself) */
    if (own)
        l->win_seen_ns = rp_now_ns();   /* (before app_waiting drops: wait_input reads both) */
    if (own)
        __atomic_sub_fetch(&l->app_waiting, 1, __ATOMIC_SEQ_CST);
    return room;
}
