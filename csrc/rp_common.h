/* Shared definitions for the rpbcast C core.
 *
 * Everything in csrc/ is plain C99 with no global state, no I/O (except
 * udpio.c and logstore.c, which are the I/O edges) and no allocation on the
 * per-message path once a structure has been sized.  Errors are returned as
 * negative codes; nothing aborts the process on bad input.
 */
#ifndef RP_COMMON_H
#define RP_COMMON_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define RP_LIKELY(x)   __builtin_expect(!!(x), 1)
#define RP_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define RP_INLINE      static inline __attribute__((always_inline))
#else
#define RP_LIKELY(x)   (x)
#define RP_UNLIKELY(x) (x)
#define RP_INLINE      static inline
#endif

/* Error codes shared by all core structures. */
#define RP_OK      0
#define RP_ENOMEM  (-1)   /* allocation failed or a configured bound was hit */
#define RP_EINVAL  (-2)   /* argument out of range */
#define RP_EFULL   (-3)   /* a fixed-capacity structure is full */
#define RP_EIO     (-4)   /* stable storage refused a write */

/* Little-endian loads/stores.  memcpy keeps them alignment-safe; compilers
 * turn them into single moves on little-endian targets. */
RP_INLINE uint16_t rp_ld16(const uint8_t *p) {
    uint16_t v; memcpy(&v, p, 2);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap16(v);
#endif
    return v;
}
RP_INLINE uint32_t rp_ld32(const uint8_t *p) {
    uint32_t v; memcpy(&v, p, 4);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}
RP_INLINE uint64_t rp_ld64(const uint8_t *p) {
    uint64_t v; memcpy(&v, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}
RP_INLINE void rp_st16(uint8_t *p, uint16_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap16(v);
#endif
    memcpy(p, &v, 2);
}
RP_INLINE void rp_st32(uint8_t *p, uint32_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    memcpy(p, &v, 4);
}
RP_INLINE void rp_st64(uint8_t *p, uint64_t v) {
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, 8);
}

/* Transport addresses are one uint64 (csrc/udpio.h, csrc/addr6.h): IPv4
 * ip << 16 | port in bits 0..47; an IPv6 endpoint is a handle with this tag
 * bit set (bits 48..63 of an IPv4 address are always 0). */
#define RP_ADDR6_TAG (1ULL << 62)
#define RP_ADDR_IS6(a) (((a) & RP_ADDR6_TAG) != 0 && (a) != UINT64_MAX)

/* A closed interval [lo, hi] of 64-bit sequence numbers. */
typedef struct {
    uint64_t lo;
    uint64_t hi;
} rp_ival_t;

#endif
