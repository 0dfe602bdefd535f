/* fuzz_shm_env.c: libFuzzer target for the shared-memory transport's variables (shm_env_parse:
 * COHORT_SHM_STAGE, COHORT_SHM_ARENA, COHORT_SHM_SPIN). First byte: the machine's memory, 0
 * unknown, else 2^(byte % 64) bytes; then the three values, one per line ("-" leaves one
 * unset). Parse or fail with a message naming the variable; what parses gives whole pages, a
 * segment for 256 ranks whose size does not wrap around, and a spin from 0 to 10 s. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "comm/transport/shm_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[256];
    if (size < 1 || size >= sizeof text || memchr(data, 0, size))
        return 0;
    uint64_t mem = data[0] ? (uint64_t)1 << (data[0] % 64) : 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    const char *vals[3];
    char *line = text;
    for (int i = 0; i < 3; i++) {
        char *nl = line ? strchr(line, '\n') : NULL;
        if (nl)
            *nl = '\0';
        vals[i] = line && strcmp(line, "-") ? line : NULL;
        line = nl ? nl + 1 : NULL;
    }
    shm_env e;
    coh_err_clear();
    if (shm_env_parse(vals[0], vals[1], vals[2], mem, &e) != COH_OK) {
        if (!strstr(coh_last_error(), "invalid COHORT_SHM_"))
            abort();
        return 0;
    }
    if (e.half < 4096 || e.arena < 4096 || e.half % 4096 || e.arena % 4096)
        abort();
    /* the segment's largest terms (shm.c's offsets) for the most ranks shm serves */
    unsigned __int128 bytes = (unsigned __int128)2 * e.half * 256 +
                              (unsigned __int128)e.arena * 256;
    if (bytes >> 63)
        abort();
    if (!(e.spin_s >= 0 && e.spin_s <= 10) || e.spin_set != (vals[2] != NULL))
        abort();
    return 0;
}
