#include "trace.h"

#include <stdlib.h>

const char *const rp_trace_event_names[RP_EV__COUNT] = {
    [RP_EV_SEND] = "send", [RP_EV_RECV] = "recv", [RP_EV_RECV_DUP] = "recv_dup",
    [RP_EV_DELIVER] = "deliver", [RP_EV_GAP] = "gap", [RP_EV_GOSSIP_OUT] = "gossip_out",
    [RP_EV_GOSSIP_IN] = "gossip_in", [RP_EV_RTX_REQ] = "rtx_req", [RP_EV_RTX_SERVED] = "rtx_served",
    [RP_EV_GCNOTE] = "gcnote", [RP_EV_HEARTBEAT] = "heartbeat", [RP_EV_MEMBER] = "member",
    [RP_EV_PURGE] = "purge", [RP_EV_LOST] = "lost",
};

int rp_trace_init(rp_trace_t *tr, size_t cap) {
    memset(tr, 0, sizeof(*tr));
    if (!cap)
        return RP_OK;
    tr->t = (int64_t *)malloc(cap * sizeof(int64_t));
    tr->ev = (uint8_t *)malloc(cap);
    tr->sender = (uint32_t *)malloc(cap * sizeof(uint32_t));
    tr->inc = (uint32_t *)malloc(cap * sizeof(uint32_t));
    tr->size = (uint32_t *)malloc(cap * sizeof(uint32_t));
    tr->aux = (uint32_t *)malloc(cap * sizeof(uint32_t));
    tr->count = (uint32_t *)malloc(cap * sizeof(uint32_t));
    tr->seq = (uint64_t *)malloc(cap * sizeof(uint64_t));
    tr->peer = (uint64_t *)malloc(cap * sizeof(uint64_t));
    if (!tr->t || !tr->ev || !tr->sender || !tr->inc || !tr->size || !tr->aux || !tr->count ||
        !tr->seq || !tr->peer) {
        rp_trace_free(tr);
        return RP_ENOMEM;
    }
    tr->cap = cap;
    return RP_OK;
}

void rp_trace_free(rp_trace_t *tr) {
    free(tr->t); free(tr->ev); free(tr->sender); free(tr->inc);
    free(tr->size); free(tr->aux); free(tr->count); free(tr->seq); free(tr->peer);
    memset(tr, 0, sizeof(*tr));
}
