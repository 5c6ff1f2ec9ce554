/* Large zeroed regions: the message store's arena and entry ring.
 *
 * A store touched for the first time costs a page fault and a page clear
 * per 4 KiB on the data path: faulting in the stress's 704 MiB store inside
 * a 3 s run cost it a third of its delivered rate (docs/performance.md,
 * "Pre-touching the store").  `prefault` touches a region in full when it is made, so that
 * none is left for the data path -- memory for the whole region at once,
 * as a feed that must not stall in its first minutes wants. */
#ifndef RP_BIGMEM_H
#define RP_BIGMEM_H

#include "rp_common.h"

/* Zeroed region of `bytes`; NULL when out of memory. */
void *rp_bigmem_alloc(uint64_t bytes, int prefault);
/* A region of rp_bigmem_alloc (NULL is fine), with the same `bytes`. */
void rp_bigmem_free(void *p, uint64_t bytes);

#endif
