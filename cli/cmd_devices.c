/* cmd_devices.c: `cohort devices`: the CPU and accelerators, and for each logical device a
 * program will see (cuda:0, ...) the physical device behind it; optionally what a
 * --accelerator/--devices pair selects. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cli_device.h"
#include "cohort/json_writer.h"

const char cmd_devices_summary[] = "list the CPU and accelerators and what a program will see";

static const char *const mode_names[] = {"default", "exclusive_process", "prohibited"};
static const char *const vendor_names[] = {"nvidia", "intel", "amd", "habana", "apple"};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: cohort devices [--inventory FILE] [--accelerator A] [--devices SPEC] [--json]\n"
            "\n"
            "Lists the CPU and the accelerators, and for each device a program started here\n"
            "will see (cuda:0, xpu:0, rocm:0, hpu:0, mps:0) the physical device behind it,\n"
            "applying CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER, ZE_AFFINITY_MASK,\n"
            "ZE_FLAT_DEVICE_HIERARCHY, ZE_ENABLE_PCI_ID_DEVICE_ORDER, ROCR_VISIBLE_DEVICES,\n"
            "HIP_VISIBLE_DEVICES and HABANA_VISIBLE_MODULES (Apple MPS has one device and no\n"
            "variable).\n"
            "\n"
            "  --inventory FILE   describe the machine from FILE instead of probing\n"
            "                     (also COHORT_INVENTORY=FILE; schema in docs/inventory.md)\n"
            "  --accelerator A    auto, cpu, cuda, gpu, mps, hpu, xpu or rocm: list only that\n"
            "                     kind (gpu: mps on a Mac with Apple silicon, else cuda)\n"
            "  --devices SPEC     show what SPEC selects (3, -1, auto, '1, 3', '[1,3]', '3,')\n"
            "  --json             one JSON document for scripts\n");
}

#define NKINDS 5

static int has_vendor(const coh_inventory *inv, coh_vendor v)
{
    for (int i = 0; i < inv->ngpus; i++)
        if (inv->gpus[i].vendor == v)
            return 1;
    return 0;
}

/* The accelerator kinds worth listing for this inventory. */
static int kinds(const coh_inventory *inv, coh_accel *out)
{
    static const coh_vendor vendors[NKINDS] = {COH_VENDOR_NVIDIA, COH_VENDOR_INTEL,
                                               COH_VENDOR_AMD, COH_VENDOR_HABANA,
                                               COH_VENDOR_APPLE};
    static const coh_accel accels[NKINDS] = {COH_ACCEL_CUDA, COH_ACCEL_XPU, COH_ACCEL_ROCM,
                                             COH_ACCEL_HPU, COH_ACCEL_MPS};
    int n = 0;
    for (int k = 0; k < NKINDS; k++)
        if (has_vendor(inv, vendors[k]))
            out[n++] = accels[k];
    return n;
}

/* The variable that decides what kind a sees (NULL name for mps, which has none). */
static const char *var_of(coh_accel a, const coh_vis_env *e, const char **name)
{
    switch (a) {
    case COH_ACCEL_CUDA: *name = "CUDA_VISIBLE_DEVICES"; return e->cuda_visible_devices;
    case COH_ACCEL_XPU: *name = "ZE_AFFINITY_MASK"; return e->ze_affinity_mask;
    case COH_ACCEL_ROCM: *name = "ROCR_VISIBLE_DEVICES"; return e->rocr_visible_devices;
    case COH_ACCEL_HPU: *name = "HABANA_VISIBLE_MODULES"; return e->habana_visible_modules;
    default: *name = NULL; return NULL;
    }
}

static void print_human_section(const coh_inventory *inv, const coh_visible *v,
                                const coh_vis_env *env)
{
    const char *name, *val = var_of(v->accel, env, &name);
    if (!name)
        printf("\n%s devices (no visibility variable: one device", coh_accel_name(v->accel));
    else
        printf("\n%s devices (%s%s%s%s", coh_accel_name(v->accel), name, val ? "='" : " unset",
               val ? val : "", val ? "'" : "");
    if (v->accel == COH_ACCEL_CUDA)
        printf(", CUDA_DEVICE_ORDER %s", env->cuda_device_order ? env->cuda_device_order
                                                                : "unset: FASTEST_FIRST");
    if (v->accel == COH_ACCEL_XPU)
        printf(", ZE_FLAT_DEVICE_HIERARCHY %s", env->ze_flat_device_hierarchy
                                                    ? env->ze_flat_device_hierarchy
                                                    : "unset: FLAT assumed");
    const char *hip_var, *hip = coh_hip_visible_value(env, &hip_var);
    if (v->accel == COH_ACCEL_ROCM && hip)
        printf(", %s='%s'", hip_var, hip);
    printf("):\n");
    if (v->count == 0)
        printf("  none visible\n");
    else
        cli_device_table(inv, v, NULL, 0, stdout);
    if (v->accel != COH_ACCEL_CUDA)
        return;
    for (int i = 0; i < inv->ngpus; i++) /* MIG uuids are what CUDA_VISIBLE_DEVICES needs */
        for (int m = 0; m < inv->gpus[i].nmig; m++)
            printf("  MIG instance of nvidia-smi %d: %s (gpu instance %d, compute instance "
                   "%d, %llu MiB)\n", inv->gpus[i].physical_index,
                   inv->gpus[i].mig[m].uuid, inv->gpus[i].mig[m].gpu_instance,
                   inv->gpus[i].mig[m].compute_instance,
                   (unsigned long long)inv->gpus[i].mig[m].memory_total_mib);
}

static void print_cpu_human(const coh_inventory *inv)
{
    const coh_cpu_info *c = &inv->cpu;
    printf("cpu: %d cores online, %d NUMA node%s, %d available to this process (affinity %d",
           c->cores_online, c->numa_nodes, c->numa_nodes == 1 ? "" : "s", c->cores_available,
           c->affinity_cores);
    if (c->cgroup_limit > 0)
        printf(", cgroup limit %.2f cores)\n", c->cgroup_limit);
    else
        printf(", no cgroup limit)\n");
}

static void json_cpu_and_gpus(coh_jw *w, const coh_inventory *inv)
{
    coh_jw_field_string(w, "source", inv->source);
    coh_jw_field_string(w, "note", inv->note[0] ? inv->note : NULL);
    coh_jw_key(w, "cpu");
    coh_jw_object_begin(w);
    coh_jw_field_int(w, "cores_online", inv->cpu.cores_online);
    coh_jw_field_int(w, "numa_nodes", inv->cpu.numa_nodes);
    coh_jw_field_int(w, "affinity_cores", inv->cpu.affinity_cores);
    coh_jw_field_double(w, "cgroup_limit", inv->cpu.cgroup_limit);
    coh_jw_field_int(w, "cores_available", inv->cpu.cores_available);
    coh_jw_object_end(w);
    coh_jw_key(w, "gpus");
    coh_jw_array_begin(w);
    for (int i = 0; i < inv->ngpus; i++) {
        const coh_gpu *g = &inv->gpus[i];
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", g->cc_major, g->cc_minor);
        coh_jw_object_begin(w);
        coh_jw_field_string(w, "vendor", vendor_names[g->vendor]);
        coh_jw_field_int(w, "physical_index", g->physical_index);
        coh_jw_field_string(w, "name", g->name);
        coh_jw_field_string(w, "uuid", g->uuid);
        coh_jw_field_string(w, "pci_bus_id", g->pci_bus_id);
        coh_jw_field_uint(w, "memory_total_mib", g->memory_total_mib);
        coh_jw_field_uint(w, "memory_used_mib", g->memory_used_mib);
        coh_jw_field_int(w, "utilization_pct", g->utilization_pct);
        coh_jw_field_string(w, "compute_mode", mode_names[g->compute_mode]);
        coh_jw_field_int(w, "processes", g->processes);
        coh_jw_field_string(w, "process_owners", g->owners);
        coh_jw_field_string(w, "compute_capability", cc);
        coh_jw_field_int(w, "multiprocessors", g->multiprocessors);
        coh_jw_field_int(w, "clock_mhz", g->clock_mhz);
        coh_jw_field_int(w, "tiles", g->tiles);
        coh_jw_key(w, "module_id");
        if (g->vendor == COH_VENDOR_HABANA)
            coh_jw_int(w, g->module_id);
        else
            coh_jw_null(w);
        coh_jw_key(w, "mig");
        coh_jw_array_begin(w);
        for (int m = 0; m < g->nmig; m++) {
            coh_jw_object_begin(w);
            coh_jw_field_string(w, "uuid", g->mig[m].uuid);
            coh_jw_field_int(w, "gpu_instance", g->mig[m].gpu_instance);
            coh_jw_field_int(w, "compute_instance", g->mig[m].compute_instance);
            coh_jw_field_uint(w, "memory_total_mib", g->mig[m].memory_total_mib);
            coh_jw_object_end(w);
        }
        coh_jw_array_end(w);
        coh_jw_object_end(w);
    }
    coh_jw_array_end(w);
}

static void json_visible(coh_jw *w, const coh_inventory *inv, const coh_visible *v)
{
    coh_jw_key(w, coh_accel_name(v->accel));
    coh_jw_object_begin(w);
    coh_jw_key(w, "devices");
    coh_jw_array_begin(w);
    for (int l = 0; l < v->count; l++)
        cli_device_json(w, inv, v, l);
    coh_jw_array_end(w);
    coh_jw_field_string(w, "cut", v->cut != COH_CUT_NONE ? v->cut_note : NULL);
    coh_jw_field_int(w, "cut_entry", v->cut_entry);
    coh_jw_field_string(w, "warning", v->order_note[0] ? v->order_note : NULL);
    coh_jw_field_string(w, "note", v->note[0] ? v->note : NULL);
    coh_jw_object_end(w);
}

typedef struct opts {
    const char *inventory, *accel_text, *spec;
    int json;
} opts;

/* What a value-less option wants, for its error. */
static const char *value_hint(const char *opt)
{
    if (!strncmp(opt, "--accelerator", 13))
        return " (auto, cpu, cuda, gpu, mps, hpu, xpu or rocm)";
    if (!strncmp(opt, "--devices", 9))
        return " (a count like 3, -1 or auto for all, or indices like '1, 3')";
    if (!strncmp(opt, "--inventory", 11))
        return " (an inventory file, see docs/inventory.md)";
    return "";
}

static int parse_args(int argc, char **argv, opts *o)
{
    static const struct option longs[] = {
        {"inventory", required_argument, 0, 'i'}, {"accelerator", required_argument, 0, 'a'},
        {"devices", required_argument, 0, 'd'},   {"json", no_argument, 0, 'j'},
        {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, ":h", longs, NULL)) != -1) {
        switch (c) {
        case 'i': o->inventory = optarg; break;
        case 'a': o->accel_text = optarg; break;
        case 'd': o->spec = optarg; break;
        case 'j': o->json = 1; break;
        case 'h': usage(stdout); return -1;
        case ':': return cli_usage_error("devices", "option '%s' needs a value%s",
                                         argv[optind - 1], value_hint(argv[optind - 1]));
        default: return cli_usage_error("devices", "unknown option '%s' (see --help)",
                                        argv[optind - 1]);
        }
    }
    return cli_no_operands("devices", argc, argv);
}

/* Compute every listed kind's visibility; returns the count or -exit code. */
static int compute_all(const coh_inventory *inv, const coh_vis_env *env, coh_accel only,
                       int have_only, coh_visible *vis)
{
    coh_accel list[NKINDS];
    int n = have_only ? 1 : kinds(inv, list);
    if (have_only)
        list[0] = only;
    int k = 0;
    for (int i = 0; i < n; i++) {
        if (list[i] == COH_ACCEL_CPU)
            continue;
        coh_status st = coh_visible_compute(inv, list[i], env, &vis[k]);
        if (st != COH_OK)
            return -cli_fail("devices", st);
        if (vis[k].accel == COH_ACCEL_CPU)
            continue; /* auto found no accelerator */
        int rc = cli_device_check("devices", &vis[k]);
        k++;
        if (rc != CLI_OK)
            return -rc;
    }
    return k;
}

/* Say why there is no mps row where someone may look for one: without --accelerator, or with
 * one that could mean mps. */
static int mps_line_wanted(const coh_inventory *inv, coh_accel a, int given)
{
    if (has_vendor(inv, COH_VENDOR_APPLE))
        return 0;
    return !given || a == COH_ACCEL_AUTO || a == COH_ACCEL_MPS || a == COH_ACCEL_GPU;
}

static void print_selection(const coh_inventory *inv, const coh_selection *s, const char *spec,
                            coh_jw *w)
{
    if (w) {
        coh_jw_key(w, "selection");
        coh_jw_object_begin(w);
        coh_jw_field_string(w, "accelerator", coh_accel_name(s->accel));
        coh_jw_field_string(w, "devices", spec);
        coh_jw_field_int(w, "count", s->n);
        coh_jw_key(w, "logical_indices");
        coh_jw_array_begin(w);
        for (int i = 0; s->accel != COH_ACCEL_CPU && i < s->n; i++)
            coh_jw_int(w, s->logical[i]);
        coh_jw_array_end(w);
        coh_jw_field_string(w, "variable", s->var);
        coh_jw_field_string(w, "value", s->var ? s->value : NULL);
        coh_jw_object_end(w);
        return;
    }
    if (s->accel == COH_ACCEL_CPU) {
        printf("\nselected: accelerator cpu, devices '%s' = %d process%s\n", spec, s->n,
               s->n == 1 ? "" : "es");
        return;
    }
    printf("\nselected: accelerator %s, devices '%s' = %d device%s:\n", coh_accel_name(s->accel),
           spec, s->n, s->n == 1 ? "" : "s");
    cli_device_table(inv, &s->vis, s->logical, s->n, stdout);
    if (s->var)
        printf("a child process gets %s=%s\n", s->var, s->value);
    else
        printf("a child process needs no variable (%s has one device)\n",
               coh_accel_name(s->accel));
    if (s->accel == COH_ACCEL_HPU)
        printf("(local rank N uses the N-th module: give every rank the same value)\n");
}

static int run(const opts *o, coh_inventory *inv)
{
    coh_accel accel = COH_ACCEL_AUTO;
    if (o->accel_text && coh_accel_parse(o->accel_text, &accel) != COH_OK)
        return cli_fail("devices", COH_ERR_INVALID);
    coh_vis_env env;
    coh_vis_env_from_process(&env);
    coh_visible vis[NKINDS];
    memset(vis, 0, sizeof vis);
    int nv = compute_all(inv, &env, accel, o->accel_text != NULL, vis);
    int rc = nv < 0 ? -nv : CLI_OK;
    coh_selection sel;
    memset(&sel, 0, sizeof sel);
    coh_status sel_st = COH_OK;
    int want_sel = o->spec || o->accel_text;
    if (rc == CLI_OK && want_sel) {
        sel_st = coh_devices_select(inv, &env, accel, o->spec, &sel);
        if (sel_st == COH_ERR_NOT_FOUND) /* nothing visible: still list what there is */
            want_sel = 0;
        else if (sel_st != COH_OK)
            rc = cli_fail("devices", sel_st);
    }
    if (rc == CLI_OK && o->json) {
        coh_jw w;
        coh_jw_init(&w, stdout, 1);
        coh_jw_object_begin(&w);
        json_cpu_and_gpus(&w, inv);
        coh_jw_key(&w, "visible");
        coh_jw_object_begin(&w);
        for (int i = 0; i < nv; i++)
            json_visible(&w, inv, &vis[i]);
        coh_jw_object_end(&w);
        if (want_sel)
            print_selection(inv, &sel, o->spec ? o->spec : "auto", &w);
        coh_jw_object_end(&w);
        coh_jw_finish(&w);
    } else if (rc == CLI_OK) {
        printf("source: %s\n", inv->source);
        print_cpu_human(inv);
        if (inv->note[0])
            printf("nvidia: %s\n", inv->note);
        if (mps_line_wanted(inv, accel, o->accel_text != NULL))
            printf("mps: none (Apple MPS exists only on macOS on Apple silicon)\n");
        for (int i = 0; i < nv; i++)
            print_human_section(inv, &vis[i], &env);
        if (want_sel)
            print_selection(inv, &sel, o->spec ? o->spec : "auto", NULL);
    }
    if (rc == CLI_OK && sel_st == COH_ERR_NOT_FOUND) {
        fflush(stdout);
        rc = cli_fail("devices", sel_st);
    }
    coh_selection_release(&sel);
    for (int i = 0; i < NKINDS; i++)
        coh_visible_release(&vis[i]);
    return rc;
}

int cmd_devices(int argc, char **argv)
{
    opts o = {0};
    int rc = parse_args(argc, argv, &o);
    if (rc != CLI_OK)
        return rc < 0 ? CLI_OK : rc;
    coh_inventory *inv = NULL;
    if ((rc = cli_device_open("devices", o.inventory, &inv)) != CLI_OK)
        return rc;
    rc = run(&o, inv);
    coh_inventory_destroy(inv);
    return rc;
}
