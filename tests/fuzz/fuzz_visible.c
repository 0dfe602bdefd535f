/* fuzz_visible.c: libFuzzer target for the visibility variables (CUDA_VISIBLE_DEVICES,
 * CUDA_DEVICE_ORDER, ZE_AFFINITY_MASK, ZE_ENABLE_PCI_ID_DEVICE_ORDER, ROCR_ and
 * HIP_VISIBLE_DEVICES) on a fixed mixed machine. Input: one byte whose low six bits say which
 * variables are set, whose seventh sets one_device_per_worker and whose eighth
 * ZE_FLAT_DEVICE_HIERARCHY=COMPOSITE (else unset: FLAT), then their values separated
 * by newlines. Checks: results name only devices of the right vendor, no device twice, at most
 * one MIG instance for one process, and the value cohort gives a child makes it see exactly
 * the same devices in the same order. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/device.h"

static const char machine[] =
    "{\"cpu\":{\"cores\":4},\"gpus\":["
    "{\"vendor\":\"nvidia\",\"name\":\"a\",\"uuid\":\"GPU-aa11\",\"memory_total_mib\":10,"
    "\"compute_capability\":\"7.0\",\"pci_bus_id\":\"00000000:01:00.0\"},"
    "{\"vendor\":\"nvidia\",\"name\":\"b\",\"uuid\":\"GPU-aa22\",\"memory_total_mib\":10,"
    "\"compute_capability\":\"8.0\",\"pci_bus_id\":\"00000000:02:00.0\",\"mig\":["
    "{\"uuid\":\"MIG-m1\",\"gpu_instance\":1,\"compute_instance\":0,\"memory_total_mib\":5},"
    "{\"uuid\":\"MIG-m2\",\"gpu_instance\":2,\"compute_instance\":0,\"memory_total_mib\":5}]},"
    "{\"vendor\":\"nvidia\",\"name\":\"c\",\"uuid\":\"GPU-bb33\",\"memory_total_mib\":10,"
    "\"compute_capability\":\"8.0\",\"pci_bus_id\":\"00000000:03:00.0\"},"
    "{\"vendor\":\"intel\",\"name\":\"i\",\"uuid\":\"i0\",\"memory_total_mib\":10,\"tiles\":2},"
    "{\"vendor\":\"intel\",\"name\":\"j\",\"uuid\":\"i1\",\"memory_total_mib\":10,\"tiles\":2},"
    "{\"vendor\":\"amd\",\"name\":\"r\",\"uuid\":\"GPU-r0\",\"memory_total_mib\":10},"
    "{\"vendor\":\"amd\",\"name\":\"s\",\"uuid\":\"GPU-r1\",\"memory_total_mib\":10},"
    "{\"vendor\":\"amd\",\"name\":\"t\",\"uuid\":\"GPU-s2\",\"memory_total_mib\":10}]}";

static coh_inventory *inv;

static int same(const coh_visible *a, const coh_visible *b)
{
    if (a->count != b->count)
        return 0;
    for (int i = 0; i < a->count; i++)
        if (a->dev[i].gpu != b->dev[i].gpu || a->dev[i].mig != b->dev[i].mig ||
            a->dev[i].tile != b->dev[i].tile)
            return 0;
    return 1;
}

static void check(const coh_visible *v, coh_vendor vendor, const coh_vis_env *env)
{
    int nmig = 0;
    for (int i = 0; i < v->count; i++) {
        nmig += v->dev[i].mig >= 0;
        const coh_visible_device *d = &v->dev[i];
        if (d->gpu < 0 || d->gpu >= inv->ngpus || inv->gpus[d->gpu].vendor != vendor)
            abort();
        for (int j = 0; j < i; j++)
            if (v->dev[j].gpu == d->gpu && v->dev[j].mig == d->mig && v->dev[j].tile == d->tile)
                abort();
    }
    if (v->cut != COH_CUT_NONE && !v->cut_note[0])
        abort();
    if (nmig > 1 && !env->one_device_per_worker) /* one process enumerates one MIG device */
        abort();
}

/* The child gets var=value and keeps the rest of env: it must see what v shows. */
static void round_trip(const coh_visible *v, const coh_vis_env *env, coh_accel a,
                       coh_id_format fmt)
{
    int all[64];
    int n = v->count < 64 ? v->count : 64;
    for (int i = 0; i < n; i++)
        all[i] = i;
    const char *var;
    char value[1024];
    if (coh_child_env(inv, v, env, all, n, fmt, &var, value, sizeof value) != COH_OK)
        abort();
    coh_vis_env child = *env;
    if (a == COH_ACCEL_CUDA)
        child.cuda_visible_devices = value;
    else if (a == COH_ACCEL_XPU)
        child.ze_affinity_mask = n ? value : "99"; /* an empty mask would mean all */
    else
        child.hip_visible_devices = n ? value : "-1"; /* an empty one would mean all */
    coh_visible w;
    if (coh_visible_compute(inv, a, &child, &w) != COH_OK)
        abort();
    /* The child's own variable is never cut (an empty ZE selection is written as a mask
     * that selects nothing); a cut of the inherited ROCR_VISIBLE_DEVICES stays. */
    int clean = w.cut == COH_CUT_NONE ||
                (a == COH_ACCEL_ROCM && strncmp(w.cut_note, "ROCR_VISIBLE_DEVICES", 20) == 0);
    if (!same(v, &w) || (!clean && n != 0))
        abort();
    coh_visible_release(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!inv && coh_inventory_parse(machine, strlen(machine), "m", &inv) != COH_OK)
        abort();
    if (size == 0 || size > 512)
        return 0;
    char text[520];
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    const char *vals[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    char *p = text;
    for (int i = 0; i < 6; i++) {
        char *nl = strchr(p, '\n');
        if (data[0] & (1 << i))
            vals[i] = p;
        if (!nl)
            break;
        *nl = '\0';
        p = nl + 1;
    }
    coh_vis_env env = {.cuda_visible_devices = vals[0], .cuda_device_order = vals[1],
                       .ze_affinity_mask = vals[2], .ze_enable_pci_id_device_order = vals[3],
                       .rocr_visible_devices = vals[4], .hip_visible_devices = vals[5],
                       .ze_flat_device_hierarchy = data[0] & 0x80 ? "COMPOSITE" : NULL,
                       .one_device_per_worker = (data[0] >> 6) & 1};
    static const coh_accel kinds[] = {COH_ACCEL_CUDA, COH_ACCEL_XPU, COH_ACCEL_ROCM};
    static const coh_vendor vendors[] = {COH_VENDOR_NVIDIA, COH_VENDOR_INTEL, COH_VENDOR_AMD};
    for (int k = 0; k < 3; k++) {
        coh_visible v;
        if (coh_visible_compute(inv, kinds[k], &env, &v) != COH_OK)
            abort();
        check(&v, vendors[k], &env);
        round_trip(&v, &env, kinds[k], COH_ID_INDEX);
        round_trip(&v, &env, kinds[k], COH_ID_UUID);
        coh_visible_release(&v);
    }
    return 0;
}
