/* visible_cuda.c: CUDA's device order (CUDA_DEVICE_ORDER) and CUDA_VISIBLE_DEVICES: indices,
 * uuid prefixes, MIG ids, the cut at the first invalid entry, duplicates. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_int.h"
#include "util/strutil.h"

/* FASTEST_FIRST, approximated: higher compute capability, then more SMs x clock, then PCI. */
static int faster(const coh_gpu *a, const coh_gpu *b)
{
    int ca = a->cc_major * 10 + a->cc_minor, cb = b->cc_major * 10 + b->cc_minor;
    if (ca != cb)
        return ca > cb;
    long long ta = (long long)a->multiprocessors * a->clock_mhz;
    long long tb = (long long)b->multiprocessors * b->clock_mhz;
    if (ta != tb)
        return ta > tb;
    return a->physical_index < b->physical_index;
}

static int pci_order_requested(const coh_vis_env *env)
{
    return env->cuda_device_order && !strcmp(env->cuda_device_order, "PCI_BUS_ID");
}

int coh_cuda_order(const coh_inventory *inv, const coh_vis_env *env, int *order, int cap)
{
    int n = nvidia_pci_order(inv, order, cap);
    if (pci_order_requested(env))
        return n;
    for (int i = 1; i < n; i++) { /* insertion sort: stable and n is small */
        int x = order[i], j = i;
        for (; j > 0 && faster(&inv->gpus[x], &inv->gpus[order[j - 1]]); j--)
            order[j] = order[j - 1];
        order[j] = x;
    }
    return n;
}

/* ---- CUDA ------------------------------------------------------------------------------------ */

/* MIG-<uuid> (or legacy MIG-GPU-<uuid>/gi/ci): *gpu, *mig; returns a cut reason. */
static coh_cut_reason cuda_mig(const coh_inventory *inv, const int *order, int n,
                               const char *t, int *gpu, int *mig)
{
    int found = 0;
    if (coh_str_starts(t, "MIG-GPU-") && strchr(t, '/')) {
        char uuid[128];
        unsigned gi, ci;
        int k = 0;
        size_t ul = (size_t)(strchr(t, '/') - t) - 4;
        memcpy(uuid, t + 4, ul);
        uuid[ul] = '\0';
        const char *ids = strchr(t, '/'); /* digits only: %u alone takes spaces and signs */
        if (strspn(ids, "/0123456789") != strlen(ids) ||
            sscanf(ids, "/%u/%u%n", &gi, &ci, &k) != 2 || ids[k])
            return COH_CUT_MALFORMED;
        int g = vis_uuid_match(inv, order, n, uuid);
        if (g < 0)
            return g == -2 ? COH_CUT_AMBIGUOUS : COH_CUT_NO_MATCH;
        const coh_gpu *p = &inv->gpus[order[g]];
        for (int m = 0; m < p->nmig; m++)
            if (p->mig[m].gpu_instance == (int)gi && p->mig[m].compute_instance == (int)ci) {
                *gpu = order[g];
                *mig = m;
                return COH_CUT_NONE;
            }
        return COH_CUT_NO_MATCH;
    }
    for (int i = 0; i < n; i++) {
        const coh_gpu *p = &inv->gpus[order[i]];
        for (int m = 0; m < p->nmig; m++) {
            if (!coh_str_starts(p->mig[m].uuid, t))
                continue;
            if (!strcmp(p->mig[m].uuid, t)) {
                *gpu = order[i];
                *mig = m;
                return COH_CUT_NONE;
            }
            found++;
            *gpu = order[i];
            *mig = m;
        }
    }
    return found == 1 ? COH_CUT_NONE : found ? COH_CUT_AMBIGUOUS : COH_CUT_NO_MATCH;
}

static coh_cut_reason cuda_entry(const coh_inventory *inv, const int *order, int n,
                                 const entry *e, int *gpu, int *mig)
{
    const char *t = e->text;
    long idx;
    *mig = -1;
    if (!*t)
        return COH_CUT_EMPTY_ENTRY;
    /* CUDA trims an index ("0, 1") but compares a uuid as written, so " GPU-..." matches no
     * device (PyTorch's _parse_visible_devices and its uuid matcher, which its authors checked
     * against NVIDIA's driver: "GPU-123, 2" is GPU-123 alone). */
    if (e->spaced && (coh_str_starts(t, "GPU-") || coh_str_starts(t, "MIG-")))
        return COH_CUT_SPACED_ID;
    if (vis_int_entry(t, &idx)) {
        if (idx < 0)
            return COH_CUT_NEGATIVE;
        if (idx >= n)
            return COH_CUT_OUT_OF_RANGE;
        *gpu = order[idx];
        return COH_CUT_NONE;
    }
    if (coh_str_starts(t, "GPU-")) {
        int g = vis_uuid_match(inv, order, n, t);
        if (g < 0)
            return g == -2 ? COH_CUT_AMBIGUOUS : COH_CUT_NO_MATCH;
        *gpu = order[g];
        return COH_CUT_NONE;
    }
    if (coh_str_starts(t, "MIG-"))
        return cuda_mig(inv, order, n, t, gpu, mig);
    return COH_CUT_MALFORMED;
}

static void visible_list(const coh_visible *v, char *buf, size_t cap, const entry *ents)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < v->count; i++)
        coh_str_append(buf, cap, &len, "%s%s", i ? "," : "", ents[i].text);
    if (!v->count)
        coh_str_append(buf, cap, &len, "none");
}

static void cuda_order_note(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v,
                            const int *order, int n)
{
    const char *o = env->cuda_device_order;
    if (o && strcmp(o, "PCI_BUS_ID") && strcmp(o, "FASTEST_FIRST")) {
        size_t len = 0;
        coh_str_append(v->order_note, sizeof v->order_note, &len,
                   "CUDA_DEVICE_ORDER='%s' is not one of FASTEST_FIRST, PCI_BUS_ID; "
                   "CUDA uses FASTEST_FIRST", o);
        return;
    }
    if (o)
        return;
    int *pci = calloc((size_t)n + 1, sizeof *pci);
    if (!pci)
        return; /* only a warning is lost */
    nvidia_pci_order(inv, pci, n);
    for (int i = 0; i < n; i++)
        if (order[i] != pci[i]) {
            v->order_differs = 1;
            size_t len = 0;
            coh_str_append(v->order_note, sizeof v->order_note, &len,
                       "CUDA_DEVICE_ORDER is unset: CUDA numbers devices fastest first, so "
                       "cuda index %d is nvidia-smi index %d; set CUDA_DEVICE_ORDER=PCI_BUS_ID "
                       "to make the numbers agree", i, inv->gpus[order[i]].physical_index);
            break;
        }
    free(pci);
}

/* A CUDA process enumerates one MIG device, the first the list gives it (NVIDIA's MIG user
 * guide, "CUDA Device Enumeration"): one process keeps the whole GPUs and the first MIG
 * instance; the other instances are named in v->note and left out. */
static void one_mig_instance(const coh_inventory *inv, coh_visible *v)
{
    int first = -1, kept = 0, dropped = 0;
    size_t len = 0;
    char others[COH_DEV_NOTE_MAX] = "";
    for (int i = 0; i < v->count; i++) {
        const coh_visible_device *d = &v->dev[i];
        if (d->mig >= 0 && first >= 0) {
            coh_str_append(others, sizeof others, &len, "%s%s", dropped ? ", " : "",
                           inv->gpus[d->gpu].mig[d->mig].uuid);
            dropped++;
            continue;
        }
        if (d->mig >= 0)
            first = kept;
        v->dev[kept++] = *d;
    }
    if (!dropped)
        return;
    v->count = kept;
    const coh_visible_device *f = &v->dev[first];
    len = 0;
    coh_str_append(v->note, sizeof v->note, &len,
                   "CUDA_VISIBLE_DEVICES lists %d MIG instances, but a CUDA process uses only "
                   "the first (cuda:%d, %s); it cannot use %s; give each worker its own "
                   "instance (cohort run --bind-devices)", dropped + 1, first,
                   inv->gpus[f->gpu].mig[f->mig].uuid, others);
}

coh_status visible_cuda(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v)
{
    int *order = calloc((size_t)inv->ngpus + 1, sizeof *order);
    entry *ents = NULL;
    if (!order)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    int n = coh_cuda_order(inv, env, order, inv->ngpus);
    cuda_order_note(inv, env, v, order, n);
    coh_status st = COH_OK;
    const char *val = env->cuda_visible_devices;
    if (!val) {
        for (int i = 0; i < n && st == COH_OK; i++)
            if (vis_push(v, order[i], -1, -1))
                st = COH_ERR_NOMEM;
        goto out;
    }
    const char *rest = val;
    size_t rest_len = strlen(val);
    coh_str_trim(&rest, &rest_len);
    if (!rest_len)
        goto out; /* empty, or spaces only (the first entry is empty, the cut leaves nothing,
                     as PyTorch's _parse_visible_devices reads it): no GPU at all */
    ents = calloc(strlen(val) + 1, sizeof *ents);
    if (!ents) {
        st = COH_ERR_NOMEM;
        goto out;
    }
    int ne = vis_split(val, ents, (int)strlen(val) + 1);
    for (int i = 0; i < ne; i++) {
        int gpu = -1, mig = -1;
        coh_cut_reason r = cuda_entry(inv, order, n, &ents[i], &gpu, &mig);
        if (r != COH_CUT_NONE) {
            char vis[256], detail[64] = "";
            visible_list(v, vis, sizeof vis, ents);
            if (r == COH_CUT_OUT_OF_RANGE)
                snprintf(detail, sizeof detail, "(%d nvidia devices)", n);
            char cons[400];
            const char *t = ents[i].text, *digits = t + (*t == '-' || *t == '+');
            if (r == COH_CUT_MALFORMED && *digits >= '0' && *digits <= '9')
                /* "1gpu2,2ampere" is "1,2" to CUDA (PyTorch's _parse_visible_devices, tested
                 * against the driver): it is read as strtoul reads it, and the list goes on */
                snprintf(cons, sizeof cons, "CUDA reads only its leading number (%ld), as "
                         "strtoul does, and reads on; write the index alone",
                         strtol(t, NULL, 10));
            else
                snprintf(cons, sizeof cons, "the runtime ignores it and every entry after it "
                                            "(visible: %s)", vis);
            vis_set_cut(v, "CUDA_VISIBLE_DEVICES", val, &ents[i], r, *detail ? detail : NULL, cons);
            break;
        }
        for (int j = 0; j < v->count; j++)
            if (v->dev[j].gpu == gpu && v->dev[j].mig == mig) {
                vis_set_cut(v, "CUDA_VISIBLE_DEVICES", val, &ents[i], COH_CUT_DUPLICATE,
                        NULL, "CUDA then shows no device at all");
                v->count = 0;
                goto out;
            }
        if (vis_push(v, gpu, mig, -1)) {
            st = COH_ERR_NOMEM;
            goto out;
        }
    }
    if (!env->one_device_per_worker)
        one_mig_instance(inv, v);
out:
    free(order);
    free(ents);
    return st == COH_OK ? st : coh_errf(st, "out of memory");
}

