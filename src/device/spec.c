/* spec.c: --accelerator and --devices with Lightning's meanings, and the variable a child
 * process must get to see a chosen set of devices. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device/device_int.h"
#include "util/strutil.h"

/* In coh_accel's order. */
static const char *const accel_names[] = {"auto", "cpu", "cuda", "xpu", "rocm", "hpu", "mps",
                                          "gpu"};
#define NACCEL ((int)(sizeof accel_names / sizeof accel_names[0]))

coh_status coh_accel_parse(const char *text, coh_accel *out)
{
    for (int i = 0; i < NACCEL; i++)
        if (text && !strcmp(text, accel_names[i])) {
            *out = (coh_accel)i;
            return COH_OK;
        }
    return coh_errf(COH_ERR_INVALID, "invalid accelerator '%s': expected one of auto, cpu, "
                    "cuda, gpu, mps, hpu, xpu, rocm", text ? text : "");
}

const char *coh_accel_name(coh_accel a)
{
    return (unsigned)a < (unsigned)NACCEL ? accel_names[a] : "unknown";
}

#define SPEC_FORMS "a count (3), -1 or auto for all, or indices ('1, 3', '[1,3]', '3,')"

/* One integer entry of a list: digits with an optional minus sign. */
static coh_status spec_int(const char *text, const char *s, size_t len, int pos, long *v)
{
    char buf[16];
    if (len == 0)
        return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': empty entry at position %d; "
                        "expected " SPEC_FORMS, text, pos);
    const char *d = s + (*s == '-');
    size_t dl = len - (size_t)(d - s);
    if (dl == 0 || dl > 9 || strspn(d, "0123456789") < dl)
        return coh_errf(COH_ERR_INVALID,
                        "invalid device spec '%s': entry %d '%.*s' is not an integer; expected "
                        SPEC_FORMS, text, pos, (int)(len > 40 ? 40 : len), s);
    memcpy(buf, s, len);
    buf[len] = '\0';
    *v = strtol(buf, NULL, 10);
    return COH_OK;
}

static coh_status spec_list(const char *text, const char *s, size_t len, int trailing_ok,
                            coh_device_spec *out)
{
    out->kind = COH_SPEC_LIST;
    out->n = 0;
    size_t i = 0;
    int pos = 1;
    while (i <= len) {
        size_t j = i;
        while (j < len && s[j] != ',')
            j++;
        const char *e = s + i;
        size_t elen = j - i;
        coh_str_trim(&e, &elen);
        if (j == len && elen == 0 && pos > 1 && trailing_ok)
            break; /* "3,": a trailing comma makes a one-element list */
        long v;
        coh_status st = spec_int(text, e, elen, pos, &v);
        if (st != COH_OK)
            return st;
        if (v < 0)
            return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': index %ld at position "
                            "%d is negative; indices start at 0", text, v, pos);
        for (int k = 0; k < out->n; k++)
            if (out->indices[k] == v)
                return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': index %ld appears "
                                "twice", text, v);
        if (out->n == 64)
            return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': more than 64 indices",
                            text);
        out->indices[out->n++] = (int)v;
        pos++;
        i = j + 1;
    }
    return COH_OK;
}

coh_status coh_device_spec_parse(const char *text, coh_device_spec *out)
{
    memset(out, 0, sizeof *out);
    if (!text) /* the empty spec's error below */
        text = "";
    const char *s = text;
    size_t len = strlen(text);
    coh_str_trim(&s, &len);
    if (len == 0)
        return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': it is empty; expected "
                        SPEC_FORMS, text);
    if (len == 4 && !strncmp(s, "auto", 4)) {
        out->kind = COH_SPEC_ALL;
        return COH_OK;
    }
    if (s[0] == '[') {
        if (s[len - 1] != ']')
            return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': '[' without a closing "
                            "']'", text);
        const char *in = s + 1;
        size_t il = len - 2;
        coh_str_trim(&in, &il);
        if (il == 0) {
            out->kind = COH_SPEC_LIST; /* "[]": selects nothing */
            return COH_OK;
        }
        return spec_list(text, in, il, 0, out);
    }
    if (memchr(s, ',', len))
        return spec_list(text, s, len, 1, out);
    long v;
    coh_status st = spec_int(text, s, len, 1, &v);
    if (st != COH_OK)
        return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': expected " SPEC_FORMS, text);
    if (v == -1) {
        out->kind = COH_SPEC_ALL;
        return COH_OK;
    }
    if (v < 0)
        return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': negative values other than "
                        "-1 (all devices) are not allowed", text);
    out->kind = COH_SPEC_COUNT;
    out->count = (int)v;
    return COH_OK;
}

static coh_status resolve_cpu(const coh_device_spec *spec, const char *text, int available,
                              int *out, int cap, int *n_out)
{
    int n;
    if (spec->kind == COH_SPEC_LIST)
        return coh_errf(COH_ERR_INVALID, "invalid device spec '%s' for accelerator cpu: give a "
                        "number of processes (1 or more, -1 or auto for %d), not indices",
                        text, available);
    n = spec->kind == COH_SPEC_ALL ? available : spec->count;
    if (n < 1)
        return coh_errf(COH_ERR_INVALID, "invalid device spec '%s' for accelerator cpu: at "
                        "least 1 process is needed", text);
    for (int i = 0; out && i < n && i < cap; i++)
        out[i] = i;
    *n_out = n;
    return COH_OK;
}

coh_status coh_device_spec_resolve(const coh_device_spec *spec, const char *text,
                                   coh_accel accel, int available, int *out, int cap,
                                   int *n_out)
{
    *n_out = 0;
    if (accel == COH_ACCEL_CPU)
        return resolve_cpu(spec, text, available, out, cap, n_out);
    const char *an = coh_accel_name(accel);
    if (available == 0 && accel == COH_ACCEL_MPS)
        return coh_errf(COH_ERR_NOT_FOUND, "no mps device: Apple MPS exists only on macOS on "
                        "Apple silicon");
    if (available == 0)
        return coh_errf(COH_ERR_NOT_FOUND, "no %s device is visible (devices '%s' needs at "
                        "least one)", an, text);
    if (accel == COH_ACCEL_HPU && spec->kind == COH_SPEC_LIST && spec->n > 0)
        return coh_errf(COH_ERR_INVALID, "invalid device spec '%s' for accelerator hpu: give a "
                        "number of devices (1 to %d, -1 or auto), not indices, as Lightning's "
                        "HPU accelerator does; choose modules with HABANA_VISIBLE_MODULES",
                        text, available);
    if (spec->kind == COH_SPEC_ALL) {
        for (int i = 0; i < available && i < cap; i++)
            out[i] = i;
        *n_out = available < cap ? available : cap;
        return COH_OK;
    }
    if ((spec->kind == COH_SPEC_COUNT && spec->count == 0) ||
        (spec->kind == COH_SPEC_LIST && spec->n == 0))
        return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': it selects no device, which "
                        "is not allowed for accelerator %s (valid: 1 to %d, -1, auto, or "
                        "indices 0 to %d)", text, an, available, available - 1);
    if (spec->kind == COH_SPEC_COUNT) {
        if (spec->count > available)
            return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': %d %s devices requested "
                            "but %d are visible (valid: 1 to %d, -1 or auto)", text,
                            spec->count, an, available, available);
        for (int i = 0; i < spec->count && i < cap; i++)
            out[i] = i;
        *n_out = spec->count < cap ? spec->count : cap;
        return COH_OK;
    }
    for (int i = 0; i < spec->n; i++) {
        if (spec->indices[i] >= available)
            return coh_errf(COH_ERR_INVALID, "invalid device spec '%s': index %d is out of range "
                            "(visible %s devices: 0 to %d)", text, spec->indices[i], an,
                            available - 1);
        if (i < cap)
            out[i] = spec->indices[i];
    }
    *n_out = spec->n < cap ? spec->n : cap;
    return COH_OK;
}

/* ---- the child's variable ---------------------------------------------------------------- */

static int position(const int *list, int n, int x)
{
    for (int i = 0; i < n; i++)
        if (list[i] == x)
            return i;
    return -1;
}

static coh_status child_cuda(const coh_inventory *inv, const coh_visible *vis,
                             const coh_vis_env *env, const int *logical, int n,
                             coh_id_format fmt, char *value, size_t cap, size_t *len)
{
    int *order = calloc((size_t)inv->ngpus + 1, sizeof *order);
    if (!order)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    int no = coh_cuda_order(inv, env, order, inv->ngpus);
    for (int i = 0; i < n; i++) {
        const coh_visible_device *d = &vis->dev[logical[i]];
        const char *sep = i ? "," : "";
        if (d->mig >= 0)
            coh_str_append(value, cap, len, "%s%s", sep, inv->gpus[d->gpu].mig[d->mig].uuid);
        else if (fmt == COH_ID_UUID)
            coh_str_append(value, cap, len, "%s%s", sep, inv->gpus[d->gpu].uuid);
        else
            coh_str_append(value, cap, len, "%s%d", sep, position(order, no, d->gpu));
    }
    free(order);
    return COH_OK;
}

static coh_status child_ze(const coh_inventory *inv, const coh_visible *vis,
                           const coh_vis_env *env, const int *logical, int n, char *value,
                           size_t cap, size_t *len)
{
    /* The mask cannot reorder: write the chosen devices in enumeration order, numbered as the
     * child's ZE_FLAT_DEVICE_HIERARCHY numbers them (with FLAT a tile is a device N). */
    int first = 1;
    for (int l = 0; l < vis->count; l++) {
        if (position(logical, n, l) < 0)
            continue;
        const coh_visible_device *d = &vis->dev[l];
        int idx = ze_mask_index(inv, env, d);
        if (d->tile >= 0 && !ze_is_flat(env))
            coh_str_append(value, cap, len, "%s%d.%d", first ? "" : ",", idx, d->tile);
        else
            coh_str_append(value, cap, len, "%s%d", first ? "" : ",", idx);
        first = 0;
    }
    return COH_OK;
}

static coh_status child_rocm(const coh_inventory *inv, const coh_visible *vis,
                             const coh_vis_env *env, const int *logical, int n,
                             coh_id_format fmt, char *value, size_t cap, size_t *len)
{
    coh_vis_env rocr_only = *env;
    rocr_only.hip_visible_devices = NULL; /* the child's HIP list indexes what ROCR leaves */
    rocr_only.cuda_visible_devices = NULL;
    coh_visible base;
    coh_status st = coh_visible_compute(inv, COH_ACCEL_ROCM, &rocr_only, &base);
    if (st != COH_OK)
        return st;
    for (int i = 0; i < n; i++) {
        const coh_visible_device *d = &vis->dev[logical[i]];
        int pos = -1;
        for (int j = 0; j < base.count; j++)
            if (base.dev[j].gpu == d->gpu)
                pos = j;
        if (fmt == COH_ID_UUID)
            coh_str_append(value, cap, len, "%s%s", i ? "," : "", inv->gpus[d->gpu].uuid);
        else
            coh_str_append(value, cap, len, "%s%d", i ? "," : "", pos);
    }
    coh_visible_release(&base);
    return COH_OK;
}

/* Gaudi: the module ids in the chosen order; local rank N takes the N-th. */
static coh_status child_hpu(const coh_inventory *inv, const coh_visible *vis, const int *logical,
                            int n, char *value, size_t cap, size_t *len)
{
    for (int i = 0; i < n; i++)
        coh_str_append(value, cap, len, "%s%d", i ? "," : "",
                       inv->gpus[vis->dev[logical[i]].gpu].module_id);
    return COH_OK;
}

coh_status coh_child_env(const coh_inventory *inv, const coh_visible *vis, const coh_vis_env *env,
                         const int *logical, int n, coh_id_format fmt, const char **var,
                         char *value, size_t cap)
{
    *var = NULL;
    if (cap)
        value[0] = '\0';
    for (int i = 0; i < n; i++)
        if (logical[i] < 0 || logical[i] >= vis->count)
            return coh_errf(COH_ERR_INVALID, "device %d is not visible (visible: 0 to %d)",
                            logical[i], vis->count - 1);
    size_t len = 0;
    coh_status st;
    switch (vis->accel) {
    case COH_ACCEL_CUDA:
        *var = "CUDA_VISIBLE_DEVICES";
        st = child_cuda(inv, vis, env, logical, n, fmt, value, cap, &len);
        break;
    case COH_ACCEL_XPU:
        *var = "ZE_AFFINITY_MASK";
        st = child_ze(inv, vis, env, logical, n, value, cap, &len);
        break;
    case COH_ACCEL_ROCM:
        *var = "HIP_VISIBLE_DEVICES";
        st = child_rocm(inv, vis, env, logical, n, fmt, value, cap, &len);
        break;
    case COH_ACCEL_HPU:
        *var = "HABANA_VISIBLE_MODULES";
        st = child_hpu(inv, vis, logical, n, value, cap, &len);
        break;
    case COH_ACCEL_MPS:
        return COH_OK; /* one device and no variable: nothing to set */
    default:
        return coh_errf(COH_ERR_INVALID, "accelerator %s has no device variable",
                        coh_accel_name(vis->accel));
    }
    if (st == COH_OK && len + 1 >= cap)
        return coh_errf(COH_ERR_NOMEM, "the %s value does not fit in %zu bytes", *var, cap);
    return st;
}

/* "cpu, cuda": the kinds with a visible device, as Lightning lists them when the asked one
 * cannot run. */
static void available_kinds(const coh_inventory *inv, const coh_vis_env *env, char *buf,
                            size_t cap)
{
    static const coh_accel kinds[] = {COH_ACCEL_HPU, COH_ACCEL_MPS, COH_ACCEL_CUDA,
                                      COH_ACCEL_XPU, COH_ACCEL_ROCM};
    size_t len = 0;
    coh_str_append(buf, cap, &len, "cpu");
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++) {
        coh_visible v;
        if (coh_visible_compute(inv, kinds[i], env, &v) == COH_OK && v.count > 0)
            coh_str_append(buf, cap, &len, ", %s", coh_accel_name(kinds[i]));
        coh_visible_release(&v);
    }
}

static coh_status not_available(const coh_inventory *inv, const coh_vis_env *env,
                                coh_accel asked)
{
    char why[512], avail[128];
    snprintf(why, sizeof why, "%s", coh_last_error());
    available_kinds(inv, env, avail, sizeof avail);
    return coh_errf(COH_ERR_NOT_FOUND, "%s%s; accelerators available here: %s",
                    asked == COH_ACCEL_GPU ? "accelerator 'gpu' found no supported gpu backend "
                    "(mps or cuda): " : "", why, avail);
}

coh_status coh_devices_select(const coh_inventory *inv, const coh_vis_env *env, coh_accel accel,
                              const char *spec, coh_selection *out)
{
    memset(out, 0, sizeof *out);
    if (!spec)
        spec = "auto";
    coh_device_spec ds;
    coh_status st = coh_device_spec_parse(spec, &ds);
    if (st != COH_OK)
        return st;
    if (accel != COH_ACCEL_CPU) {
        st = coh_visible_compute(inv, accel, env, &out->vis);
        if (st != COH_OK)
            return st;
    } else {
        out->vis.accel = COH_ACCEL_CPU;
    }
    out->accel = out->vis.accel;
    /* Sized from what is visible: as many devices as the inventory has, no fixed cap. */
    int ncap = out->accel == COH_ACCEL_CPU ? 0 : out->vis.count;
    out->logical = calloc((size_t)ncap + 1, sizeof *out->logical);
    if (!out->logical)
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
    else if (out->accel == COH_ACCEL_CPU)
        st = coh_device_spec_resolve(&ds, spec, COH_ACCEL_CPU, inv->cpu.cores_available, NULL,
                                     0, &out->n);
    else
        st = coh_device_spec_resolve(&ds, spec, out->accel, out->vis.count, out->logical, ncap,
                                     &out->n);
    /* Each device is written as an index or a uuid, at most a uuid and a comma. */
    size_t vcap = (out->accel == COH_ACCEL_CPU ? 0 : (size_t)out->n) * (COH_DEV_UUID_MAX + 1) + 1;
    if (st == COH_OK && !(out->value = calloc(vcap, 1)))
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
    if (st == COH_OK && out->accel != COH_ACCEL_CPU)
        st = coh_child_env(inv, &out->vis, env, out->logical, out->n, COH_ID_INDEX, &out->var,
                           out->value, vcap);
    if (st == COH_ERR_NOT_FOUND)
        st = not_available(inv, env, accel);
    if (st != COH_OK)
        coh_selection_release(out);
    return st;
}

void coh_selection_release(coh_selection *s)
{
    if (!s)
        return;
    coh_visible_release(&s->vis);
    free(s->logical);
    free(s->value);
    memset(s, 0, sizeof *s);
}
