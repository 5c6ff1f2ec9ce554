#include "sendwindow.h"

#include <errno.h>
#include <sys/eventfd.h>
#include <unistd.h>

int rp_sendwin_init(rp_sendwin_t *w, uint64_t limit) {
    memset(w, 0, sizeof(*w));
    w->limit = limit;
    w->fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    return w->fd < 0 ? -errno : RP_OK;
}

void rp_sendwin_free(rp_sendwin_t *w) {
    if (w->fd >= 0)
        close(w->fd);
    w->fd = -1;
}

void rp_sendwin_closed(rp_sendwin_t *w) {
    w->n_closed++;
    if (!w->waiting) {
        uint64_t v;
        ssize_t r = read(w->fd, &v, sizeof(v));
        (void)r;
        w->waiting = 1;
    }
}

int rp_sendwin_reopened(const rp_sendwin_t *w, const rp_node_t *n) {
    if (w->limit) {
        uint64_t f = rp_sendwin_in_flight(n);
        if (f < w->limit ? w->limit - f < (w->limit + 3) / 4 : 1)
            return 0;
    }
    const rp_flowack_t *fa = n->flowack;
    if (fa && fa->limit && rp_flowack_room(fa, n) < (fa->limit + 3) / 4)
        return 0;
    if (fa && fa->limit_bytes && rp_flowack_room_bytes(fa, n) < (fa->limit_bytes + 3) / 4)
        return 0;
    return 1;
}

int rp_sendwin_poke(rp_sendwin_t *w, const rp_node_t *n) {
    if (!w->waiting || !rp_sendwin_reopened(w, n))
        return 0;
    w->waiting = 0;
    w->n_opened++;
    uint64_t one = 1;
    ssize_t r = write(w->fd, &one, sizeof(one));
    (void)r;
    return 1;
}

void rp_sendwin_signal(rp_sendwin_t *w) {
    if (w->fd < 0)
        return;
    w->waiting = 0;
    uint64_t one = 1;
    ssize_t r = write(w->fd, &one, sizeof(one));
    (void)r;
}

int rp_sendwin_after_rx(rp_sendwin_t *w, rp_node_t *n, int drained, int64_t now) {
    if (!n->flowack)
        return 0;
    int r = rp_flowack_after_batch(n, drained, now);
    if (r & RP_FLOWACK_MOVED)
        rp_sendwin_poke(w, n);
    return (r & RP_FLOWACK_QUEUED) != 0;
}
