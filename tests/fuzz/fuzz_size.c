/* fuzz_size.c: libFuzzer target for byte-size parsing: parse or fail cleanly, and what parses
 * prints and parses back to the same order of magnitude. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/size.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[64];
    if (size >= sizeof text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    uint64_t bytes;
    if (coh_size_parse(text, &bytes) == COH_OK) {
        char buf[32];
        coh_size_format(bytes, buf, sizeof buf);
        uint64_t back;
        if (coh_size_parse(buf, &back) != COH_OK)
            abort();
        /* Two decimals lose at most 0.5% of the value. */
        unsigned __int128 lo = bytes - bytes / 100, hi = (unsigned __int128)bytes + bytes / 100 + 1;
        if (back < lo || back > hi)
            abort();
    }
    return 0;
}
