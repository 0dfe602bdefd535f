/* strategy.c: the strategy names (the one parser of --strategy) and the ZeRO paper's per-rank
 * model-state formulas. */
#include <string.h>

#include "cohort/parallel.h"

static const char *const NAMES[COH_STRATEGY_COUNT] = {"single", "dp",    "ddp",
                                                      "zero1",  "zero2", "zero3"};

coh_status coh_strategy_parse(const char *s, coh_strategy *out)
{
    for (int i = 0; i < COH_STRATEGY_COUNT; i++) {
        if (s && !strcmp(s, NAMES[i])) {
            *out = (coh_strategy)i;
            return COH_OK;
        }
    }
    return coh_errf(COH_ERR_INVALID, "invalid strategy '%s': valid are single, dp, ddp, zero1, "
                    "zero2, zero3", s ? s : "");
}

const char *coh_strategy_name(coh_strategy s)
{
    return (unsigned)s < COH_STRATEGY_COUNT ? NAMES[s] : "unknown";
}

int coh_strategy_is_multiprocess(coh_strategy s)
{
    return s >= COH_STRATEGY_DDP && s < COH_STRATEGY_COUNT;
}

int coh_strategy_zero_stage(coh_strategy s)
{
    return s >= COH_STRATEGY_ZERO1 && s <= COH_STRATEGY_ZERO3 ? (int)(s - COH_STRATEGY_ZERO1) + 1
                                                              : 0;
}

void coh_zero_expected_bytes(coh_strategy s, size_t nparams, int dp, coh_model_state_bytes *out)
{
    int stage = coh_strategy_zero_stage(s);
    uint64_t p = nparams, d = dp > 0 ? (uint64_t)dp : 1;
    /* Rajbhandari et al. 2020, section 5: (2 + 2 + K) Psi for mixed precision; in fp32 the
     * parameter and gradient are 4 bytes each and AdamW's m and v 8 (no separate master). */
    out->params = stage >= 3 ? 4 * p / d : 4 * p;
    out->grads = stage >= 2 ? 4 * p / d : 4 * p;
    out->optim = stage >= 1 ? 8 * p / d : 8 * p;
}

void coh_dp_expected_bytes(size_t nparams, int d, coh_model_state_bytes *out)
{
    uint64_t p = nparams;
    out->params = 4 * p;
    out->grads = 4 * p;
    out->optim = d == 0 ? 8 * p : 0;
}
