/* fuzz_zero_index.c: libFuzzer target for what a ZeRO checkpoint's index and shard files hold
 * (their "ranges" tensors) and for the --strategy parser: accept or fail cleanly, and what is
 * accepted lies inside the model. First byte: 0 strategy name, 1 shard ranges, else index. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/checkpoint.h"
#include "cohort/parallel.h"
#include "train/parallel/par_trainer_int.h"

static void strategy(const uint8_t *data, size_t size)
{
    char text[32];
    if (size >= sizeof text)
        return;
    memcpy(text, data, size);
    text[size] = '\0';
    coh_strategy s;
    if (coh_strategy_parse(text, &s) == COH_OK && strcmp(coh_strategy_name(s), text))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (data[0] == 0) {
        strategy(data + 1, size - 1);
        return 0;
    }
    int cols = data[0] == 1 ? 2 : 3;
    const size_t nparams = 1000000;
    coh_st_file *f;
    if (coh_st_open_memory(data + 1, size - 1, "fuzz.index", &f) != COH_OK)
        return 0;
    int64_t *rows, k;
    size_t total;
    if (par_ranges_read(f, "fuzz.index", cols, nparams, &rows, &k, &total) == COH_OK) {
        size_t sum = 0;
        for (int64_t i = 0; i < k; i++) {
            int64_t b = rows[cols * i + cols - 2], e = rows[cols * i + cols - 1];
            if (b < 0 || e < b || (uint64_t)e > nparams)
                abort();
            sum += (size_t)(e - b);
        }
        if (sum != total)
            abort();
        free(rows);
    }
    coh_st_close(f);
    return 0;
}
