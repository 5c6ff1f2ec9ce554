#include "bigmem.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Below this a region comes from calloc; at and above, a mapping of its
 * own, page-aligned so that it can be populated in one call. */
#define RP_BIGMEM_MAP (1u << 20)

void *rp_bigmem_alloc(uint64_t bytes, int prefault) {
    if (bytes < RP_BIGMEM_MAP)
        return calloc(1, bytes ? bytes : 1);
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    if (prefault) {
#ifdef MADV_POPULATE_WRITE
        if (madvise(p, bytes, MADV_POPULATE_WRITE) == 0)
            return p;
#endif
        /* Kernels before 5.14: a write per page faults it in (it reads zero). */
        long pg = sysconf(_SC_PAGESIZE);
        for (uint64_t o = 0; o < bytes; o += (uint64_t)(pg > 0 ? pg : 4096))
            ((volatile uint8_t *)p)[o] = 0;
    }
    return p;
}

void rp_bigmem_free(void *p, uint64_t bytes) {
    if (!p)
        return;
    if (bytes < RP_BIGMEM_MAP)
        free(p);
    else
        munmap(p, bytes);
}
