/* dev_test.h: helpers of the device tests: load a test inventory, compute visibility under a
 * given environment, and describe the result as "p0,p2" (physical indices) for comparisons. */
#ifndef COHORT_TESTS_DEV_TEST_H
#define COHORT_TESTS_DEV_TEST_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/device.h"

static inline coh_inventory *load_inv(const char *name)
{
    const char *src = getenv("COHORT_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/device/inventories/%s", src ? src : ".", name);
    coh_inventory *inv = NULL;
    if (coh_inventory_load(path, &inv) != COH_OK) {
        fprintf(stderr, "cannot load %s: %s\n", path, coh_last_error());
        exit(1);
    }
    return inv;
}

/* Visible devices as "3,1" (physical index; "3/m1" for MIG instance 1; "3.1" for a tile). */
static inline const char *describe(const coh_inventory *inv, const coh_visible *v)
{
    static char buf[512];
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < v->count; i++) {
        const coh_visible_device *d = &v->dev[i];
        int p = inv->gpus[d->gpu].physical_index;
        if (d->mig >= 0)
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d/m%d", i ? "," : "", p,
                                    d->mig);
        else if (d->tile >= 0)
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d.%d", i ? "," : "", p,
                                    d->tile);
        else
            len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d", i ? "," : "", p);
    }
    return buf;
}

/* Visibility of `accel` with only the given variables set (NULL = unset). */
static inline const char *see(const coh_inventory *inv, coh_accel accel, const coh_vis_env *env,
                       coh_visible *keep)
{
    coh_visible v;
    if (coh_visible_compute(inv, accel, env, &v) != COH_OK) {
        fprintf(stderr, "coh_visible_compute failed: %s\n", coh_last_error());
        return "(error)";
    }
    const char *d = describe(inv, &v);
    if (keep)
        *keep = v;
    else
        coh_visible_release(&v);
    return d;
}

#endif
