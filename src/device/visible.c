/* visible.c: which devices a program sees and in what order, as the runtimes apply
 * CUDA_VISIBLE_DEVICES / CUDA_DEVICE_ORDER, ZE_AFFINITY_MASK, ROCR_ and HIP_VISIBLE_DEVICES. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_int.h"

void coh_vis_env_from_process(coh_vis_env *e)
{
    e->cuda_visible_devices = getenv("CUDA_VISIBLE_DEVICES");
    e->cuda_device_order = getenv("CUDA_DEVICE_ORDER");
    e->ze_affinity_mask = getenv("ZE_AFFINITY_MASK");
    e->ze_enable_pci_id_device_order = getenv("ZE_ENABLE_PCI_ID_DEVICE_ORDER");
    e->rocr_visible_devices = getenv("ROCR_VISIBLE_DEVICES");
    e->hip_visible_devices = getenv("HIP_VISIBLE_DEVICES");
}

static int vendor_list(const coh_inventory *inv, coh_vendor v, int *out, int cap)
{
    int n = 0;
    for (int i = 0; i < inv->ngpus; i++)
        if (inv->gpus[i].vendor == v && n < cap)
            out[n++] = i;
    return n;
}

int nvidia_pci_order(const coh_inventory *inv, int *order, int cap)
{
    return vendor_list(inv, COH_VENDOR_NVIDIA, order, cap);
}

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

/* ---- list walking shared by the variables ---------------------------------------------------- */

typedef struct entry {
    char text[128];
    int pos;        /* 1-based */
} entry;

/* Split value at commas into entries (spaces around an entry are dropped); returns the count
 * or -1 when there are more than cap. */
static int split(const char *value, entry *out, int cap)
{
    int n = 0;
    const char *p = value;
    for (;;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && isspace((unsigned char)*p))
            p++, len--;
        while (len && isspace((unsigned char)p[len - 1]))
            len--;
        if (n == cap)
            return -1;
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
static int int_entry(const char *t, long *v)
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
    default: return "";
    }
}

static void set_cut(coh_visible *v, const char *var, const char *value, const entry *e,
                    coh_cut_reason r, const char *detail, const char *consequence)
{
    if (v->cut != COH_CUT_NONE)
        return; /* the first cut is what matters */
    v->cut = r;
    v->cut_entry = e->pos;
    size_t len = 0;
    str_append(v->cut_note, sizeof v->cut_note, &len, "%s='%s': entry %d '%s' %s%s%s; %s", var,
               value, e->pos, e->text, reason_text(r), detail ? " " : "", detail ? detail : "",
               consequence);
}

static int push(coh_visible *v, int gpu, int mig, int tile)
{
    coh_visible_device *nd = realloc(v->dev, (size_t)(v->count + 1) * sizeof *nd);
    if (!nd)
        return -1;
    v->dev = nd;
    v->dev[v->count++] = (coh_visible_device){gpu, mig, tile};
    return 0;
}

/* Index into cand[0..n) of the device whose uuid starts with text; -1 none, -2 several. */
static int uuid_match(const coh_inventory *inv, const int *cand, int n, const char *text)
{
    int found = -1;
    size_t len = strlen(text);
    for (int i = 0; i < n; i++)
        if (!strncmp(inv->gpus[cand[i]].uuid, text, len)) {
            if (!strcmp(inv->gpus[cand[i]].uuid, text))
                return i; /* a full uuid is never ambiguous */
            found = found == -1 ? i : -2;
        }
    return found;
}

/* ---- CUDA ------------------------------------------------------------------------------------ */

/* MIG-<uuid> (or legacy MIG-GPU-<uuid>/gi/ci): *gpu, *mig; returns a cut reason. */
static coh_cut_reason cuda_mig(const coh_inventory *inv, const int *order, int n,
                               const char *t, int *gpu, int *mig)
{
    int found = 0;
    if (!strncmp(t, "MIG-GPU-", 8) && strchr(t, '/')) {
        char uuid[128];
        unsigned gi, ci;
        int k = 0;
        size_t ul = (size_t)(strchr(t, '/') - t) - 4;
        memcpy(uuid, t + 4, ul);
        uuid[ul] = '\0';
        if (sscanf(strchr(t, '/'), "/%u/%u%n", &gi, &ci, &k) != 2 || strchr(t, '/')[k])
            return COH_CUT_MALFORMED;
        int g = uuid_match(inv, order, n, uuid);
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
    size_t len = strlen(t);
    for (int i = 0; i < n; i++) {
        const coh_gpu *p = &inv->gpus[order[i]];
        for (int m = 0; m < p->nmig; m++) {
            if (strncmp(p->mig[m].uuid, t, len))
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
                                 const char *t, int *gpu, int *mig)
{
    long idx;
    *mig = -1;
    if (!*t)
        return COH_CUT_EMPTY_ENTRY;
    if (int_entry(t, &idx)) {
        if (idx < 0)
            return COH_CUT_NEGATIVE;
        if (idx >= n)
            return COH_CUT_OUT_OF_RANGE;
        *gpu = order[idx];
        return COH_CUT_NONE;
    }
    if (!strncmp(t, "GPU-", 4)) {
        int g = uuid_match(inv, order, n, t);
        if (g < 0)
            return g == -2 ? COH_CUT_AMBIGUOUS : COH_CUT_NO_MATCH;
        *gpu = order[g];
        return COH_CUT_NONE;
    }
    if (!strncmp(t, "MIG-", 4))
        return cuda_mig(inv, order, n, t, gpu, mig);
    return COH_CUT_MALFORMED;
}

static void visible_list(const coh_visible *v, char *buf, size_t cap, const entry *ents)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < v->count; i++)
        str_append(buf, cap, &len, "%s%s", i ? "," : "", ents[i].text);
    if (!v->count)
        str_append(buf, cap, &len, "none");
}

static void cuda_order_note(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v,
                            const int *order, int n)
{
    const char *o = env->cuda_device_order;
    if (o && strcmp(o, "PCI_BUS_ID") && strcmp(o, "FASTEST_FIRST")) {
        size_t len = 0;
        str_append(v->order_note, sizeof v->order_note, &len,
                   "CUDA_DEVICE_ORDER='%s' is not one of FASTEST_FIRST, PCI_BUS_ID; "
                   "CUDA uses FASTEST_FIRST", o);
        return;
    }
    if (o)
        return;
    for (int i = 0; i < n; i++)
        if (inv->gpus[order[i]].physical_index != i) {
            v->order_differs = 1;
            size_t len = 0;
            str_append(v->order_note, sizeof v->order_note, &len,
                       "CUDA_DEVICE_ORDER is unset: CUDA numbers devices fastest first, so "
                       "cuda index %d is nvidia-smi index %d; set CUDA_DEVICE_ORDER=PCI_BUS_ID "
                       "to make the numbers agree", i, inv->gpus[order[i]].physical_index);
            return;
        }
}

static coh_status visible_cuda(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v)
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
            if (push(v, order[i], -1, -1))
                st = COH_ERR_NOMEM;
        goto out;
    }
    if (!*val)
        goto out; /* empty: no GPU at all */
    ents = calloc(strlen(val) + 1, sizeof *ents);
    if (!ents) {
        st = COH_ERR_NOMEM;
        goto out;
    }
    int ne = split(val, ents, (int)strlen(val) + 1);
    for (int i = 0; i < ne; i++) {
        int gpu = -1, mig = -1;
        coh_cut_reason r = cuda_entry(inv, order, n, ents[i].text, &gpu, &mig);
        if (r != COH_CUT_NONE) {
            char vis[256], detail[64] = "";
            visible_list(v, vis, sizeof vis, ents);
            if (r == COH_CUT_OUT_OF_RANGE)
                snprintf(detail, sizeof detail, "(%d nvidia devices)", n);
            char cons[400];
            snprintf(cons, sizeof cons, "the runtime ignores it and every entry after it "
                                        "(visible: %s)", vis);
            set_cut(v, "CUDA_VISIBLE_DEVICES", val, &ents[i], r, *detail ? detail : NULL, cons);
            break;
        }
        for (int j = 0; j < v->count; j++)
            if (v->dev[j].gpu == gpu && v->dev[j].mig == mig) {
                set_cut(v, "CUDA_VISIBLE_DEVICES", val, &ents[i], COH_CUT_DUPLICATE,
                        NULL, "CUDA then shows no device at all");
                v->count = 0;
                goto out;
            }
        if (push(v, gpu, mig, -1)) {
            st = COH_ERR_NOMEM;
            goto out;
        }
    }
out:
    free(order);
    free(ents);
    return st == COH_OK ? st : coh_errf(st, "out of memory");
}

/* ---- Level Zero ------------------------------------------------------------------------------ */

static coh_status visible_ze(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v)
{
    int *list = calloc((size_t)inv->ngpus + 1, sizeof *list);
    if (!list)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    /* Without the driver the enumeration order is only known to be the PCI order when
     * ZE_ENABLE_PCI_ID_DEVICE_ORDER=1; cohort assumes it in both cases (docs/devices.md). */
    int n = vendor_list(inv, COH_VENDOR_INTEL, list, inv->ngpus);
    const char *po = env->ze_enable_pci_id_device_order;
    if (po && strcmp(po, "0") && strcmp(po, "1"))
        snprintf(v->order_note, sizeof v->order_note,
                 "ZE_ENABLE_PCI_ID_DEVICE_ORDER='%s' is not 0 or 1", po);
    const char *val = env->ze_affinity_mask;
    /* whole[i]: device i selected whole; tiles[i]: bit mask of selected tiles */
    unsigned char *whole = calloc((size_t)n + 1, 1);
    unsigned long long *tiles = calloc((size_t)n + 1, sizeof *tiles);
    entry *ents = val ? calloc(strlen(val) + 1, sizeof *ents) : NULL;
    coh_status st = COH_OK;
    if (!whole || !tiles || (val && !ents)) {
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
        goto out;
    }
    if (!val || !*val) {
        memset(whole, 1, (size_t)n);
    } else {
        int ne = split(val, ents, (int)strlen(val) + 1);
        for (int i = 0; i < ne; i++) {
            const char *t = ents[i].text;
            long d, s = -1;
            char dev[64];
            const char *dot = strchr(t, '.');
            size_t dl = dot ? (size_t)(dot - t) : strlen(t);
            snprintf(dev, sizeof dev, "%.*s", (int)(dl < 63 ? dl : 63), t);
            if (!*t || !int_entry(dev, &d) || d < 0 || dev[0] == '+' ||
                (dot && (!int_entry(dot + 1, &s) || s < 0 || dot[1] == '+'))) {
                set_cut(v, "ZE_AFFINITY_MASK", val, &ents[i],
                        *t ? COH_CUT_MALFORMED : COH_CUT_EMPTY_ENTRY,
                        *t ? "(expected N or N.M)" : NULL,
                        "level zero stops reading the mask there");
                break;
            }
            if (d >= n || (s >= 0 && s >= inv->gpus[list[d]].tiles)) {
                char detail[64];
                snprintf(detail, sizeof detail, "(%d intel devices%s)", n,
                         s >= 0 && d < n ? ", fewer tiles" : "");
                set_cut(v, "ZE_AFFINITY_MASK", val, &ents[i], COH_CUT_OUT_OF_RANGE, detail,
                        "it selects nothing");
                continue;
            }
            if (s < 0)
                whole[d] = 1;
            else
                tiles[d] |= 1ULL << s;
        }
    }
    for (int i = 0; i < n && st == COH_OK; i++) {
        if (whole[i]) {
            if (push(v, list[i], -1, -1))
                st = coh_errf(COH_ERR_NOMEM, "out of memory");
            continue;
        }
        for (int t = 0; t < inv->gpus[list[i]].tiles && st == COH_OK; t++)
            if ((tiles[i] >> t) & 1 && push(v, list[i], -1, t))
                st = coh_errf(COH_ERR_NOMEM, "out of memory");
    }
out:
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
    int ne = *val ? split(val, ents, (int)strlen(val) + 1) : 0, k = 0;
    for (int i = 0; i < ne; i++) {
        const char *t = ents[i].text;
        long idx;
        int pick = -1;
        coh_cut_reason r = COH_CUT_NONE;
        if (!*t)
            r = COH_CUT_EMPTY_ENTRY;
        else if (int_entry(t, &idx))
            r = idx < 0 ? COH_CUT_NEGATIVE : idx >= *n ? COH_CUT_OUT_OF_RANGE : COH_CUT_NONE,
            pick = (int)idx;
        else if (!strncmp(t, "GPU-", 4)) {
            pick = uuid_match(inv, cand, *n, t);
            r = pick == -1 ? COH_CUT_NO_MATCH : pick == -2 ? COH_CUT_AMBIGUOUS : COH_CUT_NONE;
        } else
            r = COH_CUT_MALFORMED;
        for (int j = 0; r == COH_CUT_NONE && j < k; j++)
            if (out[j] == cand[pick])
                r = COH_CUT_DUPLICATE;
        if (r != COH_CUT_NONE) {
            set_cut(v, var, val, &ents[i], r, NULL,
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

static coh_status visible_rocm(const coh_inventory *inv, const coh_vis_env *env, coh_visible *v)
{
    int *cand = calloc((size_t)inv->ngpus + 1, sizeof *cand);
    if (!cand)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    int n = vendor_list(inv, COH_VENDOR_AMD, cand, inv->ngpus);
    coh_status st = rocm_filter(inv, "ROCR_VISIBLE_DEVICES", env->rocr_visible_devices, cand,
                                &n, v);
    if (st == COH_OK)
        st = rocm_filter(inv, "HIP_VISIBLE_DEVICES", env->hip_visible_devices, cand, &n, v);
    for (int i = 0; i < n && st == COH_OK; i++)
        if (push(v, cand[i], -1, -1))
            st = coh_errf(COH_ERR_NOMEM, "out of memory");
    free(cand);
    return st;
}

coh_status coh_visible_compute(const coh_inventory *inv, coh_accel accel,
                               const coh_vis_env *env, coh_visible *out)
{
    memset(out, 0, sizeof *out);
    coh_status st = COH_OK;
    if (accel == COH_ACCEL_AUTO) {
        static const coh_accel tries[] = {COH_ACCEL_CUDA, COH_ACCEL_XPU, COH_ACCEL_ROCM};
        for (size_t i = 0; i < 3; i++) {
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
