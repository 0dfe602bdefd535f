/* reduce_copy.c: a copy that bypasses the caches (non-temporal stores), for blocks too large
 * to stay cached: it spares the read of every destination line a normal store makes first. */
#include <string.h>

#include "comm/reduce.h"

#if defined(__x86_64__)
#include <emmintrin.h>

void coh_copy_stream(void *dst, const void *src, size_t bytes)
{
    char *d = dst;
    const char *s = src;
    size_t head = (64 - ((uintptr_t)d & 63)) & 63; /* whole lines per store group */
    if (head > bytes)
        head = bytes;
    memcpy(d, s, head);
    d += head, s += head, bytes -= head;
    for (; bytes >= 64; d += 64, s += 64, bytes -= 64)
        for (int k = 0; k < 64; k += 16)
            _mm_stream_si128((__m128i *)(d + k), _mm_loadu_si128((const __m128i *)(s + k)));
    _mm_sfence(); /* the streamed lines are visible before whatever the caller publishes next */
    memcpy(d, s, bytes);
}
#else
void coh_copy_stream(void *dst, const void *src, size_t bytes) { memcpy(dst, src, bytes); }
#endif
