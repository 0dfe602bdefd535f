/* fuzz_shard.c: libFuzzer target for the token shard header check: any bytes are accepted or
 * refused cleanly, and an accepted shard's size matches its token count. */
#include <stdint.h>
#include <stdlib.h>

#include "cohort/data.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t n = 0;
    if (coh_shard_check(data, size, "fuzz.bin", &n) == COH_OK &&
        (uint64_t)size != COH_SHARD_HEADER_BYTES + 2 * n)
        abort();
    return 0;
}
