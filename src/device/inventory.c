/* inventory.c: the inventory file (a machine's accelerators described in JSON), validated with
 * errors that name the JSON path and the bad value; plus inventory lifetime and selection. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "device/device_int.h"
#include "util/json.h"
#include "util/strutil.h"

typedef struct ctx {
    const char *name; /* file name for messages */
    char path[128];   /* JSON path of the value being read */
} ctx;

static coh_status bad(const ctx *c, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

static coh_status bad(const ctx *c, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return coh_errf(COH_ERR_INVALID, "%s: %s: %s", c->name, c->path, msg);
}

/* Bytes of the printable UTF-8 character at u[0..len), or 0 for a control character (C0,
 * DEL, C1 U+0080..U+009F) or a byte that starts no valid character: strings are printed to
 * terminals, where such bytes could start an escape sequence. */
static size_t text_char(const unsigned char *u, size_t len)
{
    unsigned ch = u[0];
    size_t n = ch < 0x80 ? 1 : ch >= 0xc2 && ch <= 0xdf ? 2 : ch >= 0xe0 && ch <= 0xef ? 3
             : ch >= 0xf0 && ch <= 0xf4 ? 4 : 0;
    if (ch < 0x20 || ch == 0x7f || n == 0 || n > len)
        return 0;
    for (size_t k = 1; k < n; k++)
        if ((u[k] & 0xc0) != 0x80)
            return 0;
    return ch == 0xc2 && u[1] <= 0x9f ? 0 : n;
}

/* Position of the first byte of s that is not printable text, or -1. */
static long control_at(const char *s, size_t len)
{
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0, n; i < len; i += n)
        if ((n = text_char(u + i, len - i)) == 0)
            return (long)i;
    return -1;
}

/* The value as a user would recognise it in the file, for messages. */
static const char *show(const json_value *v, char *buf, size_t cap)
{
    switch (v->type) {
    case JSON_STRING: {
        size_t o = 0;
        buf[o++] = '\'';
        const unsigned char *u = (const unsigned char *)v->u.str.chars;
        size_t i = 0, n;
        for (; i < v->u.str.len && o + 8 < cap; i += n ? n : 1) { /* room for 4 bytes, ... and ' */
            n = text_char(u + i, v->u.str.len - i);
            if (n)
                memcpy(buf + o, u + i, n);
            else
                buf[o] = '?';
            o += n ? n : 1;
        }
        if (i < v->u.str.len) {
            memcpy(buf + o, "...", 3);
            o += 3;
        }
        buf[o++] = '\'';
        buf[o] = '\0';
        return buf;
    }
    case JSON_NUMBER:
        if (v->u.num.is_integer)
            snprintf(buf, cap, "%lld", (long long)v->u.num.integer);
        else
            snprintf(buf, cap, "%g", v->u.num.value);
        return buf;
    case JSON_BOOL:
        return v->u.boolean ? "true" : "false";
    default:
        snprintf(buf, cap, "%s %s", v->type == JSON_ARRAY || v->type == JSON_OBJECT ? "an" : "",
                 json_type_name(v->type));
        return buf[0] == ' ' ? buf + 1 : buf;
    }
}

static void path_set(ctx *c, const char *base, const char *key)
{
    snprintf(c->path, sizeof c->path, "%s%s%s", base, *base ? "." : "", key);
}

static coh_status check_keys(ctx *c, const json_value *obj, const char *const *allowed)
{
    if (obj->type != JSON_OBJECT) {
        char b[80];
        return bad(c, "expected an object, got %s", show(obj, b, sizeof b));
    }
    for (size_t i = 0; i < obj->u.obj.count; i++) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            ok |= !strcmp(obj->u.obj.keys[i], *a);
        if (!ok) {
            char list[400];
            size_t len = 0;
            list[0] = '\0';
            for (const char *const *a = allowed; *a; a++)
                coh_str_append(list, sizeof list, &len, "%s%s", a == allowed ? "" : ", ", *a);
            char b[80];
            json_value key = {.type = JSON_STRING};
            key.u.str.chars = obj->u.obj.keys[i];
            key.u.str.len = obj->u.obj.key_lens[i];
            return bad(c, "unknown key %s (valid keys: %s)", show(&key, b, sizeof b), list);
        }
    }
    return COH_OK;
}

/* Integer member `key` of obj in [lo, hi]; *out keeps its default when absent and optional. */
static coh_status get_int(const json_value *obj, const char *base, const char *key, int required,
                          long long lo, long long hi, long long *out, ctx *c)
{
    path_set(c, base, key);
    const json_value *v = json_get(obj, key);
    if (!v)
        return required ? bad(c, "missing (an integer from %lld to %lld is required)", lo, hi)
                        : COH_OK;
    char b[80];
    if (v->type != JSON_NUMBER || !v->u.num.is_integer || v->u.num.integer < lo ||
        v->u.num.integer > hi)
        return bad(c, "%s is not an integer from %lld to %lld", show(v, b, sizeof b), lo, hi);
    *out = v->u.num.integer;
    return COH_OK;
}

/* Number member `key` of obj, finite, in [lo, hi]; required. */
static coh_status get_num(const json_value *obj, const char *base, const char *key, double lo,
                          double hi, double *out, ctx *c)
{
    path_set(c, base, key);
    const json_value *v = json_get(obj, key);
    if (!v)
        return bad(c, "missing (a number from %g to %g is required)", lo, hi);
    char b[80];
    if (v->type != JSON_NUMBER || !isfinite(v->u.num.value) || v->u.num.value < lo ||
        v->u.num.value > hi)
        return bad(c, "%s is not a number from %g to %g", show(v, b, sizeof b), lo, hi);
    *out = v->u.num.value;
    return COH_OK;
}

static coh_status get_str(const json_value *obj, const char *base, const char *key, int required,
                          char *dst, size_t cap, ctx *c)
{
    path_set(c, base, key);
    const json_value *v = json_get(obj, key);
    if (!v)
        return required ? bad(c, "missing (a string is required)") : COH_OK;
    char b[80];
    if (v->type != JSON_STRING)
        return bad(c, "%s is not a string", show(v, b, sizeof b));
    if (v->u.str.len == 0 || v->u.str.len >= cap || strlen(v->u.str.chars) != v->u.str.len)
        return bad(c, "%s must be 1 to %zu characters without NUL", show(v, b, sizeof b), cap - 1);
    long at = control_at(v->u.str.chars, v->u.str.len);
    if (at >= 0)
        return bad(c, "%s has a control character or invalid UTF-8 at byte %ld (only printable "
                   "text is allowed)",
                   show(v, b, sizeof b), at + 1);
    memcpy(dst, v->u.str.chars, v->u.str.len + 1);
    return COH_OK;
}

/* Array member `key` of obj, of `what` ("devices"); *out is NULL when absent and optional. */
static coh_status get_array(const json_value *obj, const char *base, const char *key, int required,
                            const char *what, const json_value **out, ctx *c)
{
    path_set(c, base, key);
    *out = json_get(obj, key);
    if (!*out)
        return required ? bad(c, "missing (an array of %s, possibly empty, is required)", what)
                        : COH_OK;
    char b[80];
    if ((*out)->type != JSON_ARRAY)
        return bad(c, "%s is not an array of %s", show(*out, b, sizeof b), what);
    return COH_OK;
}

static coh_status get_enum(const json_value *obj, const char *base, const char *key,
                           const char *const *names, int *out, ctx *c)
{
    char text[32] = "";
    coh_status st = get_str(obj, base, key, 0, text, sizeof text, c);
    if (st == COH_ERR_INVALID && json_get(obj, key) && json_get(obj, key)->type == JSON_STRING)
        text[0] = '\0'; /* too long: fall through to "not one of" */
    else if (st != COH_OK)
        return st;
    if (!json_get(obj, key))
        return COH_OK;
    for (int i = 0; names[i]; i++)
        if (!strcmp(text, names[i])) {
            *out = i;
            return COH_OK;
        }
    char list[160], b[80];
    size_t len = 0;
    list[0] = '\0';
    for (int i = 0; names[i]; i++)
        coh_str_append(list, sizeof list, &len, "%s%s", i ? ", " : "", names[i]);
    return bad(c, "%s is not one of %s", show(json_get(obj, key), b, sizeof b), list);
}

/* "0000:07:00.0" or "00000000:07:00.0" (hex) into the canonical 8-digit form and a sort key. */
static int parse_bus_id(const char *s, char *canon, size_t cap, unsigned long long *key)
{
    unsigned dom, bus, dev, fn;
    int n = 0;
    size_t dlen = strcspn(s, ":");
    if ((dlen != 4 && dlen != 8) || strspn(s, "0123456789abcdefABCDEF") != dlen)
        return -1;
    if (sscanf(s, "%x:%2x:%2x.%1x%n", &dom, &bus, &dev, &fn, &n) != 4 || s[n] != '\0' ||
        strlen(s) != dlen + 8 || dev > 31 || fn > 7)
        return -1;
    snprintf(canon, cap, "%08X:%02X:%02X.%X", dom, bus, dev, fn);
    *key = ((unsigned long long)dom << 16) | (bus << 8) | (dev << 3) | fn;
    return 0;
}

static const char *const vendor_names[] = {"nvidia", "intel", "amd", "habana", "apple", NULL};
static const char *const mode_names[] = {"default", "exclusive_process", "prohibited", NULL};
static const char *const gpu_keys[] = {
    "vendor", "name", "uuid", "pci_bus_id", "memory_total_mib", "memory_used_mib",
    "utilization_pct", "compute_mode", "processes", "process_owners", "compute_capability",
    "multiprocessors", "clock_mhz", "tiles", "mig", "module_id", NULL};
static const char *const mig_keys[] = {"uuid", "gpu_instance", "compute_instance",
                                       "memory_total_mib", "memory_used_mib", "processes", NULL};
static const char *const cpu_keys[] = {"cores", "numa_nodes", "cores_available", NULL};
static const char *const root_keys[] = {"cpu", "gpus", "links", NULL}; /* links: cohort plan */
static const char *const links_keys[] = {"intra_node", "inter_node", NULL};
static const char *const link_keys[] = {"gbytes_per_s", "latency_us", NULL};

#define MAX_MIB (1LL << 40)
static coh_status parse_mig(const json_value *v, const char *base, coh_mig *m, ctx *c)
{
    snprintf(c->path, sizeof c->path, "%s", base);
    JSON_TRY(check_keys(c, v, mig_keys));
    long long gi = 0, ci = 0, tot = 0, used = 0, procs = 0;
    JSON_TRY(get_str(v, base, "uuid", 1, m->uuid, sizeof m->uuid, c));
    if (!coh_str_starts(m->uuid, "MIG-"))
        return bad(c, "'%s' does not start with 'MIG-'", m->uuid);
    JSON_TRY(get_int(v, base, "gpu_instance", 1, 0, 1 << 20, &gi, c));
    JSON_TRY(get_int(v, base, "compute_instance", 1, 0, 1 << 20, &ci, c));
    JSON_TRY(get_int(v, base, "memory_total_mib", 1, 1, MAX_MIB, &tot, c));
    JSON_TRY(get_int(v, base, "memory_used_mib", 0, 0, tot, &used, c));
    JSON_TRY(get_int(v, base, "processes", 0, 0, 1 << 20, &procs, c));
    m->gpu_instance = (int)gi;
    m->compute_instance = (int)ci;
    m->memory_total_mib = (uint64_t)tot;
    m->memory_used_mib = (uint64_t)used;
    m->processes = (int)procs;
    return COH_OK;
}

static coh_status parse_cc(const json_value *v, const char *base, coh_gpu *g, ctx *c)
{
    char cc[16] = "";
    JSON_TRY(get_str(v, base, "compute_capability", 0, cc, sizeof cc, c));
    if (!cc[0])
        return COH_OK;
    int maj, min, n = 0;
    if (sscanf(cc, "%2d.%1d%n", &maj, &min, &n) != 2 || cc[n] || maj < 1 || min < 0 ||
        cc[0] == '+' || cc[0] == ' ')
        return bad(c, "'%s' is not a compute capability like '8.0' or '9.0'", cc);
    g->cc_major = maj;
    g->cc_minor = min;
    return COH_OK;
}

/* Each owner owns at least one of the `processes` running processes (the probe lists each
 * owner once), so there are never more owners than processes. */
static coh_status parse_owners(const json_value *v, const char *base, long long processes,
                               coh_gpu *g, ctx *c)
{
    const json_value *a;
    JSON_TRY(get_array(v, base, "process_owners", 0, "user names", &a, c));
    if (!a)
        return COH_OK;
    char b[80];
    if ((long long)a->u.arr.count > processes)
        return bad(c, "%zu owner%s, but processes is %lld: each owner runs at least one "
                      "process", a->u.arr.count, a->u.arr.count == 1 ? "" : "s", processes);
    size_t len = 0;
    for (size_t i = 0; i < a->u.arr.count; i++) {
        const json_value *s = a->u.arr.items[i];
        if (s->type != JSON_STRING || s->u.str.len == 0 || strlen(s->u.str.chars) != s->u.str.len ||
            control_at(s->u.str.chars, s->u.str.len) >= 0)
            return bad(c, "item %zu: %s is not a user name", i, show(s, b, sizeof b));
        coh_str_append(g->owners, sizeof g->owners, &len, "%s%s", i ? "," : "", s->u.str.chars);
    }
    return COH_OK;
}

static coh_status parse_mig_array(const json_value *v, const char *base, coh_gpu *g, ctx *c)
{
    const json_value *a;
    JSON_TRY(get_array(v, base, "mig", 0, "MIG instances", &a, c));
    if (!a)
        return COH_OK;
    if (g->vendor != COH_VENDOR_NVIDIA)
        return bad(c, "only nvidia devices have MIG instances");
    if (a->u.arr.count > 64)
        return bad(c, "%zu instances; at most 64 are supported", a->u.arr.count);
    g->mig = calloc(a->u.arr.count ? a->u.arr.count : 1, sizeof *g->mig);
    if (!g->mig)
        return coh_errf(COH_ERR_NOMEM, "out of memory reading %s", c->name);
    for (size_t i = 0; i < a->u.arr.count; i++) {
        char mb[128];
        snprintf(mb, sizeof mb, "%s.mig[%zu]", base, i);
        JSON_TRY(parse_mig(a->u.arr.items[i], mb, &g->mig[i], c));
        g->nmig = (int)i + 1;
    }
    return COH_OK;
}

/* Gaudi modules carry the id HABANA_VISIBLE_MODULES names (hl-smi's module_id), which need not
 * follow the PCI order: required for habana, refused for the others. */
static coh_status parse_module_id(const json_value *v, const char *base, coh_gpu *g, ctx *c)
{
    long long id = -1;
    int habana = g->vendor == COH_VENDOR_HABANA;
    path_set(c, base, "module_id");
    if (!habana && json_get(v, "module_id"))
        return bad(c, "only habana devices have a module id");
    JSON_TRY(get_int(v, base, "module_id", habana, 0, 1023, &id, c));
    g->module_id = habana ? (int)id : -1;
    return COH_OK;
}

static coh_status parse_gpu(const json_value *v, const char *base, coh_gpu *g, ctx *c)
{
    snprintf(c->path, sizeof c->path, "%s", base);
    JSON_TRY(check_keys(c, v, gpu_keys));
    int vendor = -1, mode = 0;
    path_set(c, base, "vendor");
    if (!json_get(v, "vendor"))
        return bad(c, "missing (one of nvidia, intel, amd, habana, apple is required)");
    JSON_TRY(get_enum(v, base, "vendor", vendor_names, &vendor, c));
    g->vendor = (coh_vendor)vendor;
    JSON_TRY(get_str(v, base, "name", 1, g->name, sizeof g->name, c));
    JSON_TRY(get_str(v, base, "uuid", 1, g->uuid, sizeof g->uuid, c));
    if (g->vendor == COH_VENDOR_NVIDIA && !coh_str_starts(g->uuid, "GPU-"))
        return bad(c, "'%s' does not start with 'GPU-' as nvidia uuids do", g->uuid);
    char bus[COH_DEV_BUSID_MAX] = "";
    JSON_TRY(get_str(v, base, "pci_bus_id", 0, bus, sizeof bus, c));
    unsigned long long key;
    if (bus[0] && parse_bus_id(bus, g->pci_bus_id, sizeof g->pci_bus_id, &key) != 0)
        return bad(c, "'%s' is not a pci bus id like '00000000:07:00.0'", bus);
    long long tot = 0, used = 0, util = 0, procs = 0, sms = 0, clock = 0, tiles = 1;
    JSON_TRY(get_int(v, base, "memory_total_mib", 1, 1, MAX_MIB, &tot, c));
    JSON_TRY(get_int(v, base, "memory_used_mib", 0, 0, tot, &used, c));
    JSON_TRY(get_int(v, base, "utilization_pct", 0, 0, 100, &util, c));
    JSON_TRY(get_enum(v, base, "compute_mode", mode_names, &mode, c));
    JSON_TRY(get_int(v, base, "processes", 0, 0, 1 << 20, &procs, c));
    JSON_TRY(parse_owners(v, base, procs, g, c));
    JSON_TRY(parse_cc(v, base, g, c));
    JSON_TRY(get_int(v, base, "multiprocessors", 0, 0, 1 << 20, &sms, c));
    JSON_TRY(get_int(v, base, "clock_mhz", 0, 0, 1 << 20, &clock, c));
    JSON_TRY(get_int(v, base, "tiles", 0, 1, 64, &tiles, c));
    if (tiles != 1 && g->vendor != COH_VENDOR_INTEL)
        return bad(c, "only intel devices have tiles");
    JSON_TRY(parse_module_id(v, base, g, c));
    g->memory_total_mib = (uint64_t)tot;
    g->memory_used_mib = (uint64_t)used;
    g->utilization_pct = (int)util;
    g->compute_mode = (coh_compute_mode)mode;
    g->processes = (int)procs;
    g->multiprocessors = (int)sms;
    g->clock_mhz = (int)clock;
    g->tiles = (int)tiles;
    return parse_mig_array(v, base, g, c);
}

static coh_status parse_cpu(const json_value *root, coh_cpu_info *cpu, ctx *c)
{
    const json_value *v = json_get(root, "cpu");
    if (!v)
        return coh_cpu_probe(cpu);
    snprintf(c->path, sizeof c->path, "cpu");
    JSON_TRY(check_keys(c, v, cpu_keys));
    long long cores = 0, numa = 1, avail = 0;
    JSON_TRY(get_int(v, "cpu", "cores", 1, 1, 1 << 20, &cores, c));
    JSON_TRY(get_int(v, "cpu", "numa_nodes", 0, 1, cores, &numa, c));
    avail = cores;
    JSON_TRY(get_int(v, "cpu", "cores_available", 0, 1, cores, &avail, c));
    cpu->cores_online = (int)cores;
    cpu->numa_nodes = (int)numa;
    cpu->affinity_cores = (int)avail;
    cpu->cgroup_limit = 0;
    cpu->cores_available = (int)avail;
    return COH_OK;
}

/* One link of "links": both figures required, so a link is never half-priced. The bounds keep
 * the planner's arithmetic finite: 1 kB/s to 1 PB/s, up to 10 s of latency. */
static coh_status parse_link(const json_value *links, const char *key, coh_inventory_link *l,
                             ctx *c)
{
    const json_value *v = json_get(links, key);
    if (!v)
        return COH_OK;
    char base[32];
    snprintf(base, sizeof base, "links.%s", key);
    snprintf(c->path, sizeof c->path, "%s", base);
    JSON_TRY(check_keys(c, v, link_keys));
    JSON_TRY(get_num(v, base, "gbytes_per_s", 1e-6, 1e6, &l->gbytes_per_s, c));
    return get_num(v, base, "latency_us", 0, 1e7, &l->latency_us, c);
}

/* "links" is the planner's (docs/plan.md), but checked here with the rest of the file: one
 * schema for every command, so `cohort devices` refuses the bad link `cohort plan` would. */
static coh_status parse_links(const json_value *root, coh_inventory *inv, ctx *c)
{
    const json_value *v = json_get(root, "links");
    if (!v)
        return COH_OK;
    snprintf(c->path, sizeof c->path, "links");
    JSON_TRY(check_keys(c, v, links_keys));
    JSON_TRY(parse_link(v, "intra_node", &inv->intra_node, c));
    return parse_link(v, "inter_node", &inv->inter_node, c);
}

/* What MIG makes physically impossible on GPU i: an instance larger than its GPU, two
 * instances with one (gpu_instance, compute_instance) pair (the pair names one instance, as
 * CUDA's MIG-GPU-<uuid>/<gi>/<ci> does), compute instances of one GPU instance that disagree
 * on its memory (they share it), GPU instances whose memory adds up to more than the GPU's
 * (they partition it), and MIG on a GPU older than compute capability 8.0 (Ampere), where the
 * hardware has none (NVIDIA's MIG user guide, "Supported GPUs"). */
static coh_status check_mig(const coh_gpu *g, int i, ctx *c)
{
    if (g->nmig && g->cc_major && g->cc_major < 8) {
        snprintf(c->path, sizeof c->path, "gpus[%d].mig", i);
        return bad(c, "MIG instances on a GPU of compute capability %d.%d; MIG needs 8.0 or "
                      "later", g->cc_major, g->cc_minor);
    }
    uint64_t partitioned = 0;
    for (int m = 0; m < g->nmig; m++) {
        const coh_mig *x = &g->mig[m];
        snprintf(c->path, sizeof c->path, "gpus[%d].mig[%d].memory_total_mib", i, m);
        if (x->memory_total_mib > g->memory_total_mib)
            return bad(c, "%llu is more than its GPU's memory_total_mib (%llu)",
                       (unsigned long long)x->memory_total_mib,
                       (unsigned long long)g->memory_total_mib);
        int first_of_instance = 1;
        for (int k = 0; k < m; k++) {
            const coh_mig *y = &g->mig[k];
            if (y->gpu_instance != x->gpu_instance)
                continue;
            first_of_instance = 0;
            snprintf(c->path, sizeof c->path, "gpus[%d].mig[%d].compute_instance", i, m);
            if (y->compute_instance == x->compute_instance)
                return bad(c, "%d with gpu_instance %d is also gpus[%d].mig[%d]: each "
                              "(gpu_instance, compute_instance) pair names one instance",
                           x->compute_instance, x->gpu_instance, i, k);
            snprintf(c->path, sizeof c->path, "gpus[%d].mig[%d].memory_total_mib", i, m);
            if (y->memory_total_mib != x->memory_total_mib)
                return bad(c, "%llu differs from gpus[%d].mig[%d] (%llu) of the same "
                              "gpu_instance %d, whose memory its compute instances share",
                           (unsigned long long)x->memory_total_mib, i, k,
                           (unsigned long long)y->memory_total_mib, x->gpu_instance);
        }
        if (!first_of_instance)
            continue;
        partitioned += x->memory_total_mib;
        snprintf(c->path, sizeof c->path, "gpus[%d].mig[%d].memory_total_mib", i, m);
        if (partitioned > g->memory_total_mib)
            return bad(c, "%llu brings the GPU instances to %llu MiB, more than their GPU's "
                          "memory_total_mib (%llu)",
                       (unsigned long long)x->memory_total_mib,
                       (unsigned long long)partitioned, (unsigned long long)g->memory_total_mib);
    }
    return COH_OK;
}

/* Uuids are unique, and each vendor's devices are listed in PCI bus order. */
static coh_status check_gpus(const coh_inventory *inv, ctx *c)
{
    for (int i = 0; i < inv->ngpus; i++) {
        const coh_gpu *g = &inv->gpus[i];
        JSON_TRY(check_mig(g, i, c));
        for (int j = 0; j < i; j++) {
            const coh_gpu *h = &inv->gpus[j];
            snprintf(c->path, sizeof c->path, "gpus[%d].uuid", i);
            if (!strcmp(g->uuid, h->uuid))
                return bad(c, "'%s' is also the uuid of gpus[%d]", g->uuid, j);
            snprintf(c->path, sizeof c->path, "gpus[%d].pci_bus_id", i);
            if (g->pci_bus_id[0] && !strcmp(g->pci_bus_id, h->pci_bus_id))
                return bad(c, "'%s' is also the pci bus id of gpus[%d]", g->pci_bus_id, j);
            snprintf(c->path, sizeof c->path, "gpus[%d].module_id", i);
            if (g->vendor == COH_VENDOR_HABANA && h->vendor == COH_VENDOR_HABANA &&
                g->module_id == h->module_id)
                return bad(c, "%d is also the module id of gpus[%d]", g->module_id, j);
            snprintf(c->path, sizeof c->path, "gpus[%d].vendor", i);
            if (g->vendor == COH_VENDOR_APPLE && h->vendor == COH_VENDOR_APPLE)
                return bad(c, "'apple' again: a Mac has one MPS device (gpus[%d])", j);
            snprintf(c->path, sizeof c->path, "gpus[%d].pci_bus_id", i);
            if (g->vendor == h->vendor && g->pci_bus_id[0] && h->pci_bus_id[0] &&
                strcmp(g->pci_bus_id, h->pci_bus_id) < 0)
                return bad(c, "'%s' comes before gpus[%d] ('%s'): list each vendor's devices "
                              "in pci bus order", g->pci_bus_id, j, h->pci_bus_id);
            for (int m = 0; m < g->nmig; m++) {
                snprintf(c->path, sizeof c->path, "gpus[%d].mig[%d].uuid", i, m);
                for (int k = 0; k < h->nmig; k++)
                    if (!strcmp(g->mig[m].uuid, h->mig[k].uuid))
                        return bad(c, "'%s' is also the uuid of gpus[%d].mig[%d]",
                                   g->mig[m].uuid, j, k);
            }
        }
        for (int m = 0; m < g->nmig; m++)
            for (int k = 0; k < m; k++)
                if (!strcmp(g->mig[m].uuid, g->mig[k].uuid)) {
                    snprintf(c->path, sizeof c->path, "gpus[%d].mig[%d].uuid", i, m);
                    return bad(c, "'%s' is also the uuid of gpus[%d].mig[%d]", g->mig[m].uuid,
                               i, k);
                }
    }
    return COH_OK;
}

static coh_status parse_root(const json_value *root, coh_inventory *inv, ctx *c)
{
    snprintf(c->path, sizeof c->path, "(top level)");
    JSON_TRY(check_keys(c, root, root_keys));
    JSON_TRY(parse_cpu(root, &inv->cpu, c));
    const json_value *a;
    JSON_TRY(get_array(root, "", "gpus", 1, "devices", &a, c));
    if (a->u.arr.count > 1024)
        return bad(c, "%zu devices; at most 1024 are supported", a->u.arr.count);
    inv->gpus = calloc(a->u.arr.count ? a->u.arr.count : 1, sizeof *inv->gpus);
    if (!inv->gpus)
        return coh_errf(COH_ERR_NOMEM, "out of memory reading %s", c->name);
    int per_vendor[COH_VENDOR_COUNT] = {0};
    for (size_t i = 0; i < a->u.arr.count; i++) {
        char base[32];
        snprintf(base, sizeof base, "gpus[%zu]", i);
        coh_gpu *g = &inv->gpus[i];
        inv->ngpus = (int)i + 1;
        JSON_TRY(parse_gpu(a->u.arr.items[i], base, g, c));
        g->physical_index = per_vendor[g->vendor]++;
    }
    JSON_TRY(check_gpus(inv, c));
    return parse_links(root, inv, c);
}

coh_status coh_inventory_parse(const char *text, size_t len, const char *name,
                               coh_inventory **out)
{
    *out = NULL;
    json_doc *doc;
    coh_status st = json_parse(text, len, &doc);
    if (st != COH_OK)
        return coh_err_prefix(st == COH_ERR_NOMEM ? st : COH_ERR_INVALID, "%s", name);
    coh_inventory *inv = inv_alloc();
    if (!inv) {
        json_free(doc);
        return coh_errf(COH_ERR_NOMEM, "out of memory reading %s", name);
    }
    ctx c = {.name = name};
    st = parse_root(json_root(doc), inv, &c);
    json_free(doc);
    if (st != COH_OK) {
        coh_inventory_destroy(inv);
        return st;
    }
    snprintf(inv->source, sizeof inv->source, "inventory file %s", name);
    *out = inv;
    return COH_OK;
}

coh_status coh_inventory_load(const char *path, coh_inventory **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f)
        return coh_errf(COH_ERR_NOT_FOUND, "cannot open inventory file '%s': %m", path);
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        fclose(f);
        return coh_errf(COH_ERR_INVALID, "cannot read inventory file '%s': it is a directory",
                        path);
    }
    /* Read at most the limit and one byte more, so /dev/zero or a runaway file is refused
     * instead of filling memory. */
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            cap = cap * 2 + 8192;
            if (cap > COH_INVENTORY_MAX_BYTES + 1)
                cap = COH_INVENTORY_MAX_BYTES + 1;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                return coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", path);
            }
            buf = nb;
        }
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0 || len > COH_INVENTORY_MAX_BYTES)
            break;
    }
    int err = ferror(f) ? errno : 0;
    fclose(f);
    if (err) {
        free(buf);
        return coh_errf(COH_ERR_IO, "cannot read inventory file '%s': %s", path, strerror(err));
    }
    if (len > COH_INVENTORY_MAX_BYTES) {
        free(buf);
        return coh_errf(COH_ERR_INVALID, "inventory file '%s' is larger than %d MiB, the most "
                        "cohort reads", path, COH_INVENTORY_MAX_BYTES >> 20);
    }
    coh_status st = coh_inventory_parse(buf, len, path, out);
    free(buf);
    return st;
}

coh_status coh_inventory_open(const char *path, coh_inventory **out)
{
    if (path)
        return coh_inventory_load(path, out);
    const char *env = getenv("COHORT_INVENTORY");
    if (env && *env) {
        coh_status st = coh_inventory_load(env, out);
        return st == COH_OK ? st : coh_err_prefix(st, "COHORT_INVENTORY");
    }
    return coh_inventory_probe(out);
}

coh_inventory *inv_alloc(void)
{
    return calloc(1, sizeof(coh_inventory));
}

void coh_inventory_destroy(coh_inventory *inv)
{
    if (!inv)
        return;
    for (int i = 0; i < inv->ngpus; i++)
        free(inv->gpus[i].mig);
    free(inv->gpus);
    free(inv);
}
