/* fuzz_model_config.c: libFuzzer target for the Hugging Face config.json reader: any bytes are
 * read or refused cleanly, and an accepted model can be counted and estimated without overflow. */
#include <stdint.h>
#include <stdlib.h>

#include "cohort/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coh_model_desc m;
    if (coh_model_from_hf_json((const char *)data, size, &m) != COH_OK)
        return 0;
    coh_param_count c;
    if (coh_model_count(&m, &c) != COH_OK)
        abort(); /* an accepted config must be countable */
    if (c.total < c.embedding || c.largest_layer > c.total || c.largest_module > c.total)
        abort();
    coh_parallel_config s;
    coh_parallel_config_init(&s);
    s.seq = 64;
    coh_estimate e;
    if (coh_estimate_memory(&m, &s, &e) == COH_OK && e.per_device.total_bytes < e.per_device.params_bytes)
        abort();
    s.tp = 2;
    s.pp = 2;
    s.dp = 2;
    s.strategy = COH_STRATEGY_ZERO3;
    s.sequence_parallel = 1;
    s.recompute = COH_RECOMPUTE_SELECTIVE;
    (void)coh_estimate_memory(&m, &s, &e);
    return 0;
}
