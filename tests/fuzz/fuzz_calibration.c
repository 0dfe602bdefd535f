/* fuzz_calibration.c: libFuzzer target for planner calibration files (a CPU's, and a GPU's from
 * `cohort bench gemm --device cuda`): parse or fail with a message; what parses has sorted
 * positive curves (a GPU: a preset with a measured efficiency in (0, 1]) and prices a
 * configuration to a finite, positive step time, and with an "inter_node" link also one over 2
 * nodes of 2 ranks. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/planner.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coh_hw hw;
    coh_err_clear();
    coh_status st = coh_calibration_parse((const char *)data, size, "fuzz.json", &hw);
    if (st != COH_OK) {
        if (!coh_last_error()[0])
            abort(); /* a failure always says why */
        return 0;
    }
    if (hw.gpu) { /* a GPU's file: its preset with the measured efficiency, stream, overhead */
        const coh_device_rates *r = &hw.rates[0];
        if (hw.nrates != 1 || !(hw.peak_flops > 0) || !(hw.gemm_efficiency > 0) ||
            hw.gemm_efficiency > 1 || !(r->elementwise_bytes_per_s > 0) ||
            !(r->op_overhead_s >= 0) || r->gemm.n != 0)
            abort();
    } else if (hw.nrates < 1 || hw.nrates > COH_HW_MAX_RATES || hw.cores < 1 ||
               !(hw.peak_flops > 0)) {
        abort();
    }
    for (int i = 0; i < hw.nrates && !hw.gpu; i++) {
        const coh_device_rates *r = &hw.rates[i];
        if (r->gemm.n < 1 || r->gemm.n > COH_RATE_POINTS || !(r->elementwise_bytes_per_s > 0) ||
            (i && r->threads <= hw.rates[i - 1].threads))
            abort();
        for (int k = 1; k < r->gemm.n; k++)
            if (!(r->gemm.work[k] > r->gemm.work[k - 1]))
                abort();
    }
    coh_model_desc m;
    if (coh_model_gpt(2, 64, 4, 256, 32, 0, &m) != COH_OK)
        abort();
    coh_parallel_config c;
    coh_parallel_config_init(&c);
    c.dp = 2;
    c.strategy = COH_STRATEGY_ZERO3;
    c.microbatches = 2;
    coh_plan_result res;
    if (coh_plan_config(&m, &c, &hw, &res) != COH_OK || !isfinite(res.step_s) ||
        !(res.step_s > 0))
        abort();
    if (hw.inter.bytes_per_s > 0) { /* a link between nodes: 2 nodes of 2 ranks price too */
        if (!(hw.inter.alpha_s >= 0) || !isfinite(hw.inter.bytes_per_s))
            abort();
        hw.nodes = 2;
        hw.gpus_per_node = 2;
        c.dp = 4;
        if (coh_plan_config(&m, &c, &hw, &res) != COH_OK || !isfinite(res.step_s) ||
            !(res.step_s > 0) || !(res.comm_s > 0))
            abort();
    }
    return 0;
}
