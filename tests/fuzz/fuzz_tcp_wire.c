/* fuzz_tcp_wire.c: libFuzzer target for what the tcp transport reads from the network before
 * it trusts the sender: the hello that opens a data connection and rank 0's rendezvous table
 * (the first 4 bytes of the input pick the world size the table must have). An accepted table
 * must hold exactly that many ranks, each with an address and a port; an accepted hello two
 * distinct ranks inside the group. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/transport/tcp_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size >= sizeof(tcp_hello)) {
        tcp_hello h;
        memcpy(&h, data, sizeof h);
        int group = size > sizeof h ? data[sizeof h] % 9 : 0; /* 0: any size */
        if (!tcp_hello_check(&h, group) &&
            (h.magic != TCP_MAGIC || h.from < 0 || h.to < 0 || h.from == h.to ||
             (group && (h.from >= group || h.to >= group))))
            abort();
    }
    if (size < 4)
        return 0;
    int32_t want;
    memcpy(&want, data, 4);
    want = (int32_t)((uint32_t)want % 300u) - 10; /* small, zero and negative sizes too */
    tcp_addr *out = calloc(300, sizeof *out);
    char why[96];
    int rc = tcp_table_parse(data + 4, size - 4, want, out, why, sizeof why);
    if (!rc) {
        if (want < 1 || size - 4 != tcp_table_bytes(want))
            abort();
        for (int r = 0; r < want; r++)
            if (!out[r].ip || !out[r].port)
                abort();
    } else if (!memchr(why, '\0', sizeof why)) {
        abort();
    }
    free(out);
    return 0;
}
