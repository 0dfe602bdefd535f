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

/* The devices zeDeviceGet returns under ZE_FLAT_DEVICE_HIERARCHY (Level Zero specification,
 * "Device Hierarchy"): COMPOSITE, the cards (their tiles are sub-devices); FLAT and COMBINED,
 * "the devices that do not have sub-devices": every tile of a multi-tile card, in card then
 * tile order, and each single-tile card. */
typedef struct ze_root {
    int gpu;  /* index into inv->gpus */
    int tile; /* -1: the whole card */
} ze_root;

static int ze_roots(const coh_inventory *inv, const int *list, int n, int flat, ze_root *out)
{
    int k = 0;
    for (int i = 0; i < n; i++) {
        int tiles = inv->gpus[list[i]].tiles;
        if (!flat || tiles == 1)
            out[k++] = (ze_root){list[i], -1};
        else
            for (int t = 0; t < tiles; t++)
                out[k++] = (ze_root){list[i], t};
    }
    return k;
}

/* Whether a program sees FLAT numbering: FLAT or COMBINED (zeDeviceGet returns the tiles),
 * or unset, which cohort reads as FLAT (see visible_ze); 0 for COMPOSITE. */
int ze_is_flat(const coh_vis_env *env)
{
    const char *h = env->ze_flat_device_hierarchy;
    return !h || strcmp(h, "COMPOSITE") != 0;
}

/* Mark what the mask selects among the roots: whole[r] for root r, bit t of tiles[r] for its
 * sub-device t (COMPOSITE only: with FLAT the roots have no sub-devices, so N.M is invalid). */
static void ze_apply(const coh_inventory *inv, const ze_root *roots, int n, int flat,
                     const char *val, entry *ents, unsigned char *whole,
                     unsigned long long *tiles, coh_visible *v)
{
    int ne = vis_split(val, ents, (int)strlen(val) + 1);
    for (int i = 0; i < ne; i++) {
        const char *t = ents[i].text;
        long d, s;
        if (!*t || ze_entry(t, &d, &s) != 0 || (flat && s >= 0)) {
            vis_set_cut(v, "ZE_AFFINITY_MASK", val, &ents[i],
                        *t ? COH_CUT_MALFORMED : COH_CUT_EMPTY_ENTRY,
                        !*t   ? NULL
                        : flat ? "(expected N: with ZE_FLAT_DEVICE_HIERARCHY FLAT each tile is "
                                 "a device of its own and has no sub-devices)"
                               : "(expected N or N.M)",
                        "level zero stops reading the mask there");
            return;
        }
        if (d >= n || (s >= 0 && s >= inv->gpus[roots[d].gpu].tiles)) {
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

/* ZE_FLAT_DEVICE_HIERARCHY: a value Level Zero does not define is refused; unset on a machine
 * with a multi-tile card is a warning, since the driver's default decides the numbering. */
static void ze_hierarchy_notes(const coh_inventory *inv, const int *list, int n,
                               const coh_vis_env *env, coh_visible *v)
{
    const char *h = env->ze_flat_device_hierarchy;
    if (h && strcmp(h, "FLAT") && strcmp(h, "COMPOSITE") && strcmp(h, "COMBINED")) {
        snprintf(v->order_note, sizeof v->order_note,
                 "ZE_FLAT_DEVICE_HIERARCHY='%s' is not one of FLAT, COMPOSITE, COMBINED", h);
        return;
    }
    int multi = 0;
    for (int i = 0; i < n; i++)
        multi |= inv->gpus[list[i]].tiles > 1;
    if (!h && multi)
        snprintf(v->note, sizeof v->note,
                 "ZE_FLAT_DEVICE_HIERARCHY is unset: cohort assumes FLAT, the driver's default "
                 "on Intel Data Center GPU Max, where each tile is a device of its own (the "
                 "default depends on the driver and the GPU); set ZE_FLAT_DEVICE_HIERARCHY=FLAT "
                 "or COMPOSITE to be sure");
}

coh_status visible_ze(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v)
{
    /* Without the driver the enumeration order is only known to be the PCI order when
     * ZE_ENABLE_PCI_ID_DEVICE_ORDER=1; cohort assumes it in both cases (docs/devices.md). */
    const char *po = env->ze_enable_pci_id_device_order, *val = env->ze_affinity_mask;
    if (po && strcmp(po, "0") && strcmp(po, "1"))
        snprintf(v->order_note, sizeof v->order_note,
                 "ZE_ENABLE_PCI_ID_DEVICE_ORDER='%s' is not 0 or 1", po);
    int flat = ze_is_flat(env);
    size_t nroots = 0; /* at most one per tile */
    for (int i = 0; i < inv->ngpus; i++)
        nroots += inv->gpus[i].vendor == COH_VENDOR_INTEL ? (size_t)inv->gpus[i].tiles : 0;
    int *list = calloc((size_t)inv->ngpus + 1, sizeof *list);
    ze_root *roots = calloc(nroots + 1, sizeof *roots);
    unsigned char *whole = calloc(nroots + 1, 1);
    unsigned long long *tiles = calloc(nroots + 1, sizeof *tiles);
    entry *ents = val ? calloc(strlen(val) + 1, sizeof *ents) : NULL;
    coh_status st = COH_OK;
    if (!list || !roots || !whole || !tiles || (val && !ents))
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
    int nl = st == COH_OK ? vis_vendor_list(inv, COH_VENDOR_INTEL, list, inv->ngpus) : 0;
    int n = st == COH_OK ? ze_roots(inv, list, nl, flat, roots) : 0;
    if (st == COH_OK && v->order_note[0] == '\0')
        ze_hierarchy_notes(inv, list, nl, env, v);
    if (st == COH_OK && (!val || !*val))
        memset(whole, 1, (size_t)n); /* unset or empty: every device */
    else if (st == COH_OK)
        ze_apply(inv, roots, n, flat, val, ents, whole, tiles, v);
    for (int r = 0; r < n && st == COH_OK; r++) {
        if (whole[r]) {
            if (vis_push(v, roots[r].gpu, -1, roots[r].tile))
                st = coh_errf(COH_ERR_NOMEM, "out of memory");
            continue;
        }
        for (int t = 0; t < inv->gpus[roots[r].gpu].tiles && st == COH_OK; t++)
            if ((tiles[r] >> t) & 1 && vis_push(v, roots[r].gpu, -1, t))
                st = coh_errf(COH_ERR_NOMEM, "out of memory");
    }
    free(list);
    free(roots);
    free(whole);
    free(tiles);
    free(ents);
    return st;
}

/* The mask index of a visible device in the hierarchy env gives a child: its card's index
 * (COMPOSITE), or its position among the FLAT roots. */
int ze_mask_index(const coh_inventory *inv, const coh_vis_env *env, const coh_visible_device *d)
{
    int k = 0;
    for (int i = 0; i < inv->ngpus; i++) {
        const coh_gpu *g = &inv->gpus[i];
        if (g->vendor != COH_VENDOR_INTEL)
            continue;
        if (!ze_is_flat(env) || g->tiles == 1) {
            if (i == d->gpu)
                return k;
            k++;
        } else if (i == d->gpu) {
            return k + (d->tile >= 0 ? d->tile : 0);
        } else {
            k += g->tiles;
        }
    }
    return -1;
}

/* ---- ROCm ------------------------------------------------------------------------------------ */

/* Filter cand[0..*n) in place by one ROCR/HIP list: ordered, cut at the first invalid entry.
 * A repeated device cuts ROCR's list; HIP skips it and reads on (skip_repeats). */
static coh_status rocm_filter(const coh_inventory *inv, const char *var, const char *val,
                              int skip_repeats, int *cand, int *n, coh_visible *v)
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
        int repeated = 0;
        for (int j = 0; r == COH_CUT_NONE && j < k; j++)
            repeated |= out[j] == cand[pick];
        if (repeated && skip_repeats)
            continue;
        if (repeated)
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

/* The list HIP reads after ROCR (ROCm CLR, rocclr/device/rocm/rocdevice.cpp): a non-empty
 * HIP_VISIBLE_DEVICES, else a non-empty CUDA_VISIBLE_DEVICES, else none (every device);
 * GPU_DEVICE_ORDINAL is read by OpenCL only. */
const char *coh_hip_visible_value(const coh_vis_env *env, const char **var)
{
    *var = "HIP_VISIBLE_DEVICES";
    if (env->hip_visible_devices && *env->hip_visible_devices)
        return env->hip_visible_devices;
    *var = "CUDA_VISIBLE_DEVICES";
    if (env->cuda_visible_devices && *env->cuda_visible_devices)
        return env->cuda_visible_devices;
    *var = NULL;
    return NULL;
}

coh_status visible_rocm(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v)
{
    int *cand = calloc((size_t)inv->ngpus + 1, sizeof *cand);
    if (!cand)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    int n = vis_vendor_list(inv, COH_VENDOR_AMD, cand, inv->ngpus);
    coh_status st = rocm_filter(inv, "ROCR_VISIBLE_DEVICES", env->rocr_visible_devices, 0, cand,
                                &n, v);
    const char *hip_var;
    const char *hip = coh_hip_visible_value(env, &hip_var);
    if (st == COH_OK && hip)
        st = rocm_filter(inv, hip_var, hip, 1, cand, &n, v);
    for (int i = 0; i < n && st == COH_OK; i++)
        if (vis_push(v, cand[i], -1, -1))
            st = coh_errf(COH_ERR_NOMEM, "out of memory");
    free(cand);
    return st;
}

