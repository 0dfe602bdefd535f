/* visible.c: which devices a program sees and in what order: the entry point, and the list
 * walking the CUDA, Level Zero and ROCm variables share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_int.h"
#include "util/strutil.h"

void coh_vis_env_from_process(coh_vis_env *e)
{
    e->cuda_visible_devices = getenv("CUDA_VISIBLE_DEVICES");
    e->cuda_device_order = getenv("CUDA_DEVICE_ORDER");
    e->ze_affinity_mask = getenv("ZE_AFFINITY_MASK");
    e->ze_enable_pci_id_device_order = getenv("ZE_ENABLE_PCI_ID_DEVICE_ORDER");
    e->ze_flat_device_hierarchy = getenv("ZE_FLAT_DEVICE_HIERARCHY");
    e->rocr_visible_devices = getenv("ROCR_VISIBLE_DEVICES");
    e->hip_visible_devices = getenv("HIP_VISIBLE_DEVICES");
    e->habana_visible_modules = getenv("HABANA_VISIBLE_MODULES");
    e->one_device_per_worker = 0;
}

int vis_vendor_list(const coh_inventory *inv, coh_vendor v, int *out, int cap)
{
    int n = 0;
    for (int i = 0; i < inv->ngpus; i++)
        if (inv->gpus[i].vendor == v && n < cap)
            out[n++] = i;
    return n;
}

static int vendor_count(const coh_inventory *inv, coh_vendor v)
{
    int n = 0;
    for (int i = 0; i < inv->ngpus; i++)
        n += inv->gpus[i].vendor == v;
    return n;
}

int nvidia_pci_order(const coh_inventory *inv, int *order, int cap)
{
    return vis_vendor_list(inv, COH_VENDOR_NVIDIA, order, cap);
}

/* ---- list walking shared by the variables ---------------------------------------------------- */

/* Split value at commas into entries (spaces around an entry are dropped); returns the count
 * or -1 when there are more than cap. */
int vis_split(const char *value, entry *out, int cap)
{
    int n = 0;
    const char *p = value;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p), untrimmed = len;
        coh_str_trim(&p, &len);
        if (n == cap)
            return -1;
        out[n].spaced = len != untrimmed;
        if (len >= sizeof out[n].text)
            len = sizeof out[n].text - 1; /* still malformed: no valid entry is that long */
        memcpy(out[n].text, p, len);
        out[n].text[len] = '\0';
        out[n].pos = n + 1;
        n++;
        if (!e)
            return n;
        p = e + 1;
    }
}

/* An integer entry: 1 and *v set when text is [+-]digits. */
int vis_int_entry(const char *t, long *v)
{
    const char *d = t + (*t == '-' || *t == '+');
    if (!*d || strspn(d, "0123456789") != strlen(d) || strlen(d) > 9)
        return 0;
    *v = strtol(t, NULL, 10);
    return 1;
}

static const char *reason_text(coh_cut_reason r)
{
    switch (r) {
    case COH_CUT_MALFORMED: return "is not a device index or uuid";
    case COH_CUT_NEGATIVE: return "is negative";
    case COH_CUT_OUT_OF_RANGE: return "is past the last device";
    case COH_CUT_NO_MATCH: return "matches no device";
    case COH_CUT_AMBIGUOUS: return "matches several devices";
    case COH_CUT_EMPTY_ENTRY: return "is empty";
    case COH_CUT_DUPLICATE: return "repeats a device";
    case COH_CUT_SPACED_ID: return "is a uuid with spaces around it, which CUDA compares as "
                                   "written (it trims spaces only around an index)";
    default: return "";
    }
}

void vis_set_cut(coh_visible *v, const char *var, const char *value, const entry *e,
                    coh_cut_reason r, const char *detail, const char *consequence)
{
    if (v->cut != COH_CUT_NONE)
        return; /* the first cut is what matters */
    v->cut = r;
    v->cut_entry = e->pos;
    size_t len = 0;
    coh_str_append(v->cut_note, sizeof v->cut_note, &len, "%s='%s': entry %d '%s' %s%s%s; %s", var,
               value, e->pos, e->text, reason_text(r), detail ? " " : "", detail ? detail : "",
               consequence);
}

int vis_push(coh_visible *v, int gpu, int mig, int tile)
{
    coh_visible_device *nd = realloc(v->dev, (size_t)(v->count + 1) * sizeof *nd);
    if (!nd)
        return -1;
    v->dev = nd;
    v->dev[v->count++] = (coh_visible_device){gpu, mig, tile};
    return 0;
}

/* Index into cand[0..n) of the device whose uuid starts with text; -1 none, -2 several. */
int vis_uuid_match(const coh_inventory *inv, const int *cand, int n, const char *text)
{
    int found = -1;
    for (int i = 0; i < n; i++)
        if (coh_str_starts(inv->gpus[cand[i]].uuid, text)) {
            if (!strcmp(inv->gpus[cand[i]].uuid, text))
                return i; /* a full uuid is never ambiguous */
            found = found == -1 ? i : -2;
        }
    return found;
}

coh_status coh_visible_compute(const coh_inventory *inv, coh_accel accel,
                               const coh_vis_env *env, coh_visible *out)
{
    memset(out, 0, sizeof *out);
    coh_status st = COH_OK;
    if (accel == COH_ACCEL_GPU) /* Lightning: mps where there is one, else cuda */
        accel = vendor_count(inv, COH_VENDOR_APPLE) ? COH_ACCEL_MPS : COH_ACCEL_CUDA;
    if (accel == COH_ACCEL_AUTO) {
        /* Lightning's order for the kinds it knows (hpu, mps, cuda), then cohort's own. A
         * kind without devices is skipped before its variable is read, so a bad
         * HABANA_VISIBLE_MODULES only matters on a machine with Gaudi modules. */
        static const coh_accel tries[] = {COH_ACCEL_HPU, COH_ACCEL_MPS, COH_ACCEL_CUDA,
                                          COH_ACCEL_XPU, COH_ACCEL_ROCM};
        static const coh_vendor owner[] = {COH_VENDOR_HABANA, COH_VENDOR_APPLE,
                                           COH_VENDOR_NVIDIA, COH_VENDOR_INTEL, COH_VENDOR_AMD};
        for (size_t i = 0; i < 5; i++) {
            if (!vendor_count(inv, owner[i]))
                continue;
            st = coh_visible_compute(inv, tries[i], env, out);
            if (st != COH_OK || out->count > 0)
                return st;
            coh_visible_release(out);
        }
        out->accel = COH_ACCEL_CPU;
        return COH_OK;
    }
    out->accel = accel;
    if (accel == COH_ACCEL_CUDA)
        st = visible_cuda(inv, env, out);
    else if (accel == COH_ACCEL_XPU)
        st = visible_ze(inv, env, out);
    else if (accel == COH_ACCEL_ROCM)
        st = visible_rocm(inv, env, out);
    else if (accel == COH_ACCEL_HPU)
        st = visible_hpu(inv, env, out);
    else if (accel == COH_ACCEL_MPS)
        st = visible_mps(inv, out);
    if (st != COH_OK)
        coh_visible_release(out);
    return st;
}

void coh_visible_release(coh_visible *v)
{
    if (!v)
        return;
    free(v->dev);
    memset(v, 0, sizeof *v);
}
