/* visible_ze_rocm.c: Intel's ZE_AFFINITY_MASK (selects devices and tiles, never reorders) and
 * AMD's ROCR_VISIBLE_DEVICES then HIP_VISIBLE_DEVICES. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_int.h"
#include "util/strutil.h"

/* ---- Level Zero ------------------------------------------------------------------------------ */

/* "N" or "N.M" with non-negative decimal numbers: 0 and *dev, *tile (-1 when absent). */
static int ze_entry(const char *t, long *dev, long *tile)
{
    char d[64];
    const char *dot = strchr(t, '.');
    size_t dl = dot ? (size_t)(dot - t) : strlen(t);
    snprintf(d, sizeof d, "%.*s", (int)(dl < 63 ? dl : 63), t);
    *tile = -1;
    if (!vis_int_entry(d, dev) || *dev < 0 || d[0] == '+')
        return -1;
    if (dot && (!vis_int_entry(dot + 1, tile) || *tile < 0 || dot[1] == '+'))
        return -1;
    return 0;
}

/* Mark what the mask selects: whole[i] for device i, bit t of tiles[i] for its tile t. */
static void ze_apply(const coh_inventory *inv, const int *list, int n, const char *val,
                     entry *ents, unsigned char *whole, unsigned long long *tiles,
                     coh_visible *v)
{
    int ne = vis_split(val, ents, (int)strlen(val) + 1);
    for (int i = 0; i < ne; i++) {
        const char *t = ents[i].text;
        long d, s;
        if (!*t || ze_entry(t, &d, &s) != 0) {
            vis_set_cut(v, "ZE_AFFINITY_MASK", val, &ents[i],
                        *t ? COH_CUT_MALFORMED : COH_CUT_EMPTY_ENTRY,
                        *t ? "(expected N or N.M)" : NULL,
                        "level zero stops reading the mask there");
            return;
        }
        if (d >= n || (s >= 0 && s >= inv->gpus[list[d]].tiles)) {
            char detail[64];
            snprintf(detail, sizeof detail, "(%d intel devices%s)", n,
                     s >= 0 && d < n ? ", fewer tiles" : "");
            vis_set_cut(v, "ZE_AFFINITY_MASK", val, &ents[i], COH_CUT_OUT_OF_RANGE, detail,
                        "it selects nothing");
            continue; /* a device that is not there selects nothing; the rest still counts */
        }
        if (s < 0)
            whole[d] = 1;
        else
            tiles[d] |= 1ULL << s;
    }
}

coh_status visible_ze(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v)
{
    /* Without the driver the enumeration order is only known to be the PCI order when
     * ZE_ENABLE_PCI_ID_DEVICE_ORDER=1; cohort assumes it in both cases (docs/devices.md). */
    const char *po = env->ze_enable_pci_id_device_order, *val = env->ze_affinity_mask;
    if (po && strcmp(po, "0") && strcmp(po, "1"))
        snprintf(v->order_note, sizeof v->order_note,
                 "ZE_ENABLE_PCI_ID_DEVICE_ORDER='%s' is not 0 or 1", po);
    int *list = calloc((size_t)inv->ngpus + 1, sizeof *list);
    unsigned char *whole = calloc((size_t)inv->ngpus + 1, 1);
    unsigned long long *tiles = calloc((size_t)inv->ngpus + 1, sizeof *tiles);
    entry *ents = val ? calloc(strlen(val) + 1, sizeof *ents) : NULL;
    coh_status st = COH_OK;
    if (!list || !whole || !tiles || (val && !ents))
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
    int n = list ? vis_vendor_list(inv, COH_VENDOR_INTEL, list, inv->ngpus) : 0;
    if (st == COH_OK && (!val || !*val))
        memset(whole, 1, (size_t)n); /* unset or empty: every device */
    else if (st == COH_OK)
        ze_apply(inv, list, n, val, ents, whole, tiles, v);
    for (int i = 0; i < n && st == COH_OK; i++) {
        if (whole[i]) {
            if (vis_push(v, list[i], -1, -1))
                st = coh_errf(COH_ERR_NOMEM, "out of memory");
            continue;
        }
        for (int t = 0; t < inv->gpus[list[i]].tiles && st == COH_OK; t++)
            if ((tiles[i] >> t) & 1 && vis_push(v, list[i], -1, t))
                st = coh_errf(COH_ERR_NOMEM, "out of memory");
    }
    free(list);
    free(whole);
    free(tiles);
    free(ents);
    return st;
}

/* ---- ROCm ------------------------------------------------------------------------------------ */

/* Filter cand[0..*n) in place by one ROCR/HIP list: ordered, cut at the first invalid entry. */
static coh_status rocm_filter(const coh_inventory *inv, const char *var, const char *val,
                              int *cand, int *n, coh_visible *v)
{
    if (!val)
        return COH_OK;
    entry *ents = calloc(strlen(val) + 1, sizeof *ents);
    int *out = calloc((size_t)*n + 1, sizeof *out);
    if (!ents || !out) {
        free(ents);
        free(out);
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    }
    int ne = *val ? vis_split(val, ents, (int)strlen(val) + 1) : 0, k = 0;
    for (int i = 0; i < ne; i++) {
        const char *t = ents[i].text;
        long idx;
        int pick = -1;
        coh_cut_reason r = COH_CUT_NONE;
        if (!*t)
            r = COH_CUT_EMPTY_ENTRY;
        else if (vis_int_entry(t, &idx))
            r = idx < 0 ? COH_CUT_NEGATIVE : idx >= *n ? COH_CUT_OUT_OF_RANGE : COH_CUT_NONE,
            pick = (int)idx;
        else if (coh_str_starts(t, "GPU-")) {
            pick = vis_uuid_match(inv, cand, *n, t);
            r = pick == -1 ? COH_CUT_NO_MATCH : pick == -2 ? COH_CUT_AMBIGUOUS : COH_CUT_NONE;
        } else
            r = COH_CUT_MALFORMED;
        for (int j = 0; r == COH_CUT_NONE && j < k; j++)
            if (out[j] == cand[pick])
                r = COH_CUT_DUPLICATE;
        if (r != COH_CUT_NONE) {
            vis_set_cut(v, var, val, &ents[i], r, NULL,
                    "the runtime ignores it and every entry after it");
            break;
        }
        out[k++] = cand[pick];
    }
    memcpy(cand, out, (size_t)k * sizeof *out);
    *n = k;
    free(ents);
    free(out);
    return COH_OK;
}

coh_status visible_rocm(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v)
{
    int *cand = calloc((size_t)inv->ngpus + 1, sizeof *cand);
    if (!cand)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    int n = vis_vendor_list(inv, COH_VENDOR_AMD, cand, inv->ngpus);
    coh_status st = rocm_filter(inv, "ROCR_VISIBLE_DEVICES", env->rocr_visible_devices, cand,
                                &n, v);
    if (st == COH_OK)
        st = rocm_filter(inv, "HIP_VISIBLE_DEVICES", env->hip_visible_devices, cand, &n, v);
    for (int i = 0; i < n && st == COH_OK; i++)
        if (vis_push(v, cand[i], -1, -1))
            st = coh_errf(COH_ERR_NOMEM, "out of memory");
    free(cand);
    return st;
}

