/* fuzz_inventory.c: libFuzzer target for inventory files (the one parser of devices, pick,
 * run, plan and estimate): parse or fail with a message; what parses is self-consistent, its
 * links within their bounds, and survives visibility and pick. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/device.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    coh_inventory *inv = NULL;
    coh_status st = coh_inventory_parse((const char *)data, size, "fuzz.json", &inv);
    if (st != COH_OK) {
        if (inv || !coh_last_error()[0])
            abort(); /* a failure leaves nothing behind and always says why */
        return 0;
    }
    int per_vendor[COH_VENDOR_COUNT] = {0};
    for (int i = 0; i < inv->ngpus; i++) {
        const coh_gpu *g = &inv->gpus[i];
        if ((unsigned)g->vendor >= COH_VENDOR_COUNT)
            abort();
        if ((g->vendor == COH_VENDOR_HABANA) != (g->module_id >= 0))
            abort(); /* Gaudi modules and only they carry a module id */
        if (g->physical_index != per_vendor[g->vendor]++ || g->tiles < 1 ||
            g->memory_used_mib > g->memory_total_mib || g->utilization_pct > 100 ||
            !g->name[0] || !g->uuid[0])
            abort();
    }
    /* a link is given whole or not at all, within the bounds the planner prices finitely */
    const coh_inventory_link *links[] = {&inv->intra_node, &inv->inter_node};
    for (int l = 0; l < 2; l++)
        if (links[l]->gbytes_per_s != 0 &&
            !(links[l]->gbytes_per_s >= 1e-6 && links[l]->gbytes_per_s <= 1e6 &&
              links[l]->latency_us >= 0 && links[l]->latency_us <= 1e7))
            abort();
    coh_vis_env env = {0};
    static const coh_accel kinds[] = {COH_ACCEL_CUDA, COH_ACCEL_XPU, COH_ACCEL_ROCM,
                                      COH_ACCEL_HPU, COH_ACCEL_MPS, COH_ACCEL_GPU};
    for (int k = 0; k < 6; k++) {
        coh_visible v;
        if (coh_visible_compute(inv, kinds[k], &env, &v) != COH_OK)
            abort();
        coh_pick_opts o;
        coh_pick_opts_init(&o);
        coh_pick_result r;
        coh_status ps = coh_pick(inv, &v, &o, &r);
        if (ps != COH_OK && ps != COH_ERR_NOT_FOUND)
            abort();
        coh_pick_result_release(&r);
        coh_visible_release(&v);
    }
    coh_inventory_destroy(inv);
    return 0;
}
