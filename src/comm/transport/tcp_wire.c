/* tcp_wire.c: checks and parsers of what the TCP transport reads from the network before it
 * trusts it (hello, rendezvous table), and group ids; kept apart for the fuzz target. */
#include <stdio.h>
#include <string.h>

#include "comm/transport/tcp_int.h"

int tcp_hello_check(const tcp_hello *h, int size)
{
    if (h->magic != TCP_MAGIC || h->version != TCP_VERSION)
        return -1;
    if (h->from < 0 || h->to < 0 || h->from == h->to)
        return -1;
    if (size > 0 && (h->from >= size || h->to >= size))
        return -1;
    return 0;
}

size_t tcp_table_bytes(int n) { return 8 + (size_t)n * sizeof(tcp_addr); }

void tcp_table_write(void *buf, const tcp_addr *addrs, int n)
{
    uint32_t magic = TCP_MAGIC;
    int32_t nn = n;
    memcpy(buf, &magic, 4);
    memcpy((char *)buf + 4, &nn, 4);
    memcpy((char *)buf + 8, addrs, (size_t)n * sizeof *addrs);
}

int tcp_table_parse(const void *buf, size_t len, int want, tcp_addr *out, char *why, size_t n)
{
    uint32_t magic;
    int32_t nn;
    if (len < 8) {
        snprintf(why, n, "%zu bytes, fewer than a header", len);
        return -1;
    }
    memcpy(&magic, buf, 4);
    memcpy(&nn, (const char *)buf + 4, 4);
    if (magic != TCP_MAGIC) {
        snprintf(why, n, "bad magic 0x%08x", magic);
        return -1;
    }
    if (nn != want || nn < 1 || nn > TCP_TABLE_MAX) {
        snprintf(why, n, "a table of %d ranks, expected %d", (int)nn, want);
        return -1;
    }
    if (len != tcp_table_bytes(nn)) {
        snprintf(why, n, "%zu bytes for %d ranks, expected %zu", len, (int)nn,
                 tcp_table_bytes(nn));
        return -1;
    }
    memcpy(out, (const char *)buf + 8, (size_t)nn * sizeof *out);
    for (int r = 0; r < nn; r++)
        if (out[r].port == 0 || out[r].ip == 0) {
            snprintf(why, n, "rank %d has no address", r);
            return -1;
        }
    return 0;
}

static uint64_t mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull; /* splitmix64's finaliser */
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

uint64_t tcp_gid_child(uint64_t parent, uint64_t tag) { return mix(parent ^ mix(tag + 1)); }

uint64_t tcp_gid_of_text(const char *s)
{
    uint64_t h = 1469598103934665603ull; /* FNV-1a, then mixed */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return mix(h);
}
