/* zero_formulas.c: the ZeRO paper's per-rank model-state formulas (bytes of parameters,
 * gradients and optimizer state per rank for each ZeRO stage and for strategy dp). */
#include "cohort/parallel.h"

void coh_zero_expected_bytes(coh_strategy s, size_t nparams, int dp, coh_model_state_bytes *out)
{
    int zero = coh_strategy_zero_stage(s);
    uint64_t p = nparams, d = dp > 0 ? (uint64_t)dp : 1;
    /* Rajbhandari et al. 2020, section 5: (2 + 2 + K) Psi for mixed precision; in fp32 the
     * parameter and gradient are 4 bytes each and AdamW's m and v 8 (no separate master). */
    out->params = zero >= 3 ? 4 * p / d : 4 * p;
    out->grads = zero >= 2 ? 4 * p / d : 4 * p;
    out->optim = zero >= 1 ? 8 * p / d : 8 * p;
}

void coh_dp_expected_bytes(size_t nparams, int d, coh_model_state_bytes *out)
{
    uint64_t p = nparams;
    out->params = 4 * p;
    out->grads = 4 * p;
    out->optim = d == 0 ? 8 * p : 0;
}
