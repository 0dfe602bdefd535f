/* inventory_mem.c: reads the one figure the estimator needs from a device inventory file: the
 * memory of its first GPU. */
#include "plan/plan_int.h"
#include "util/json.h"

static coh_status first_gpu_memory(const json_value *root, const char *path, uint64_t *bytes)
{
    const json_value *gpus = json_get(root, "gpus");
    if (!gpus || gpus->type != JSON_ARRAY)
        return coh_errf(COH_ERR_INVALID, "inventory '%s' has no \"gpus\" array", path);
    if (gpus->u.arr.count == 0)
        return coh_errf(COH_ERR_INVALID, "inventory '%s' lists no GPUs; give --device-memory",
                        path);
    const json_value *mib = json_get(gpus->u.arr.items[0], "memory_total_mib");
    if (!mib || mib->type != JSON_NUMBER || !mib->u.num.is_integer || mib->u.num.integer < 1 ||
        mib->u.num.integer > ((int64_t)1 << 40))
        return coh_errf(COH_ERR_INVALID,
                        "inventory '%s': the first GPU has no valid \"memory_total_mib\" (a "
                        "positive integer)",
                        path);
    *bytes = (uint64_t)mib->u.num.integer << 20;
    return COH_OK;
}

coh_status coh_plan_inventory_memory(const char *path, uint64_t *bytes)
{
    json_doc *doc;
    coh_status st = json_parse_file(path, &doc);
    if (st != COH_OK)
        return st == COH_ERR_INVALID ? coh_err_prefix(st, "malformed inventory") : st;
    st = first_gpu_memory(json_root(doc), path, bytes);
    json_free(doc);
    return st;
}
