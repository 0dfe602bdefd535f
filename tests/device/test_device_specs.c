/* test_device_specs.c: --accelerator and --devices with Lightning's meanings (its device table:
 * 3, "3", -1, "-1", auto, "1, 3", [1,3], "3,", 0, "0", []) and their errors; the value a child
 * gets; the one-call selection a launcher uses. */
#include "check.h"
#include "dev_test.h"

/* Resolve spec against `available` devices of a GPU accelerator; "1,3" style result or NULL. */
static const char *sel(const char *spec, coh_accel a, int available)
{
    static char buf[256];
    coh_device_spec ds;
    int out[64], n;
    if (coh_device_spec_parse(spec, &ds) != COH_OK ||
        coh_device_spec_resolve(&ds, spec, a, available, out, 64, &n) != COH_OK)
        return NULL;
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < n; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d", i ? "," : "", out[i]);
    return buf;
}

static coh_status resolve(const char *spec, coh_accel a, int available)
{
    coh_device_spec ds;
    int out[64], n;
    coh_status st = coh_device_spec_parse(spec, &ds);
    return st != COH_OK ? st : coh_device_spec_resolve(&ds, spec, a, available, out, 64, &n);
}

static void lightning_table(void)
{
    CHECK_STR(sel("3", COH_ACCEL_CUDA, 4), "0,1,2");
    CHECK_STR(sel(" 3 ", COH_ACCEL_CUDA, 4), "0,1,2");
    CHECK_STR(sel("-1", COH_ACCEL_CUDA, 4), "0,1,2,3");
    CHECK_STR(sel("auto", COH_ACCEL_CUDA, 4), "0,1,2,3");
    CHECK_STR(sel("1, 3", COH_ACCEL_CUDA, 4), "1,3");
    CHECK_STR(sel("[1,3]", COH_ACCEL_CUDA, 4), "1,3");
    CHECK_STR(sel("[1, 3]", COH_ACCEL_CUDA, 4), "1,3");
    CHECK_STR(sel("3,", COH_ACCEL_CUDA, 4), "3");
    CHECK_STR(sel("3, 1", COH_ACCEL_CUDA, 4), "3,1"); /* order is kept */
    CHECK_STR(sel("[2]", COH_ACCEL_CUDA, 4), "2");
    CHECK(sel("0", COH_ACCEL_CUDA, 4) == NULL);
    CHECK(sel("[]", COH_ACCEL_CUDA, 4) == NULL);
    coh_device_spec ds;
    CHECK_OK(coh_device_spec_parse("0", &ds));
    CHECK_INT(ds.kind, COH_SPEC_COUNT);
    CHECK_INT(ds.count, 0);
    CHECK_OK(coh_device_spec_parse("[]", &ds));
    CHECK_INT(ds.kind, COH_SPEC_LIST);
    CHECK_INT(ds.n, 0);
    CHECK_OK(coh_device_spec_parse("-1", &ds));
    CHECK_INT(ds.kind, COH_SPEC_ALL);
}

static void spec_errors(void)
{
    CHECK_FAILS(resolve("0", COH_ACCEL_CUDA, 4), COH_ERR_INVALID,
                "invalid device spec '0': it selects no device, which is not allowed for "
                "accelerator cuda (valid: 1 to 4, -1, auto, or indices 0 to 3)");
    CHECK_FAILS(resolve("[]", COH_ACCEL_XPU, 2), COH_ERR_INVALID, "selects no device");
    CHECK_FAILS(resolve("1,,3", COH_ACCEL_CUDA, 4), COH_ERR_INVALID,
                "invalid device spec '1,,3': empty entry at position 2");
    CHECK_FAILS(resolve("1,1", COH_ACCEL_CUDA, 4), COH_ERR_INVALID, "index 1 appears twice");
    CHECK_FAILS(resolve("[0, 2, 0]", COH_ACCEL_CUDA, 4), COH_ERR_INVALID, "appears twice");
    CHECK_FAILS(resolve("5", COH_ACCEL_CUDA, 4), COH_ERR_INVALID,
                "5 cuda devices requested but 4 are visible (valid: 1 to 4, -1 or auto)");
    CHECK_FAILS(resolve("1, 7", COH_ACCEL_CUDA, 4), COH_ERR_INVALID,
                "index 7 is out of range (visible cuda devices: 0 to 3)");
    CHECK_FAILS(resolve("4,", COH_ACCEL_CUDA, 4), COH_ERR_INVALID, "index 4 is out of range");
    CHECK_FAILS(resolve("-2", COH_ACCEL_CUDA, 4), COH_ERR_INVALID,
                "'-2': negative values other than -1 (all devices) are not allowed");
    CHECK_FAILS(resolve("1,-1", COH_ACCEL_CUDA, 4), COH_ERR_INVALID,
                "index -1 at position 2 is negative");
    CHECK_FAILS(resolve("two", COH_ACCEL_CUDA, 4), COH_ERR_INVALID,
                "invalid device spec 'two': expected a count (3)");
    CHECK_FAILS(resolve("1,x", COH_ACCEL_CUDA, 4), COH_ERR_INVALID, "entry 2 'x' is not an integer");
    CHECK_FAILS(resolve("[1,3", COH_ACCEL_CUDA, 4), COH_ERR_INVALID, "without a closing ']'");
    CHECK_FAILS(resolve("[1,]", COH_ACCEL_CUDA, 4), COH_ERR_INVALID, "empty entry at position 2");
    CHECK_FAILS(resolve("", COH_ACCEL_CUDA, 4), COH_ERR_INVALID, "it is empty");
    CHECK_FAILS(resolve("99999999999", COH_ACCEL_CUDA, 4), COH_ERR_INVALID, "expected");
    CHECK_FAILS(resolve("2", COH_ACCEL_CUDA, 0), COH_ERR_NOT_FOUND,
                "no cuda device is visible (devices '2' needs at least one)");
}

/* For cpu, devices is a number of processes. */
static void cpu_processes(void)
{
    coh_device_spec ds;
    int n;
    CHECK_OK(coh_device_spec_parse("3", &ds));
    CHECK_OK(coh_device_spec_resolve(&ds, "3", COH_ACCEL_CPU, 2, NULL, 0, &n));
    CHECK_INT(n, 3);
    CHECK_OK(coh_device_spec_parse("auto", &ds));
    CHECK_OK(coh_device_spec_resolve(&ds, "auto", COH_ACCEL_CPU, 2, NULL, 0, &n));
    CHECK_INT(n, 2);
    CHECK_OK(coh_device_spec_parse("1,2", &ds));
    CHECK_FAILS(coh_device_spec_resolve(&ds, "1,2", COH_ACCEL_CPU, 2, NULL, 0, &n),
                COH_ERR_INVALID, "give a number of processes");
    CHECK_OK(coh_device_spec_parse("0", &ds));
    CHECK_FAILS(coh_device_spec_resolve(&ds, "0", COH_ACCEL_CPU, 2, NULL, 0, &n),
                COH_ERR_INVALID, "at least 1 process");
}

static void accelerators(void)
{
    coh_accel a;
    CHECK_OK(coh_accel_parse("gpu", &a)); /* resolved later: mps where there is one, else cuda */
    CHECK_INT(a, COH_ACCEL_GPU);
    CHECK_OK(coh_accel_parse("rocm", &a));
    CHECK_INT(a, COH_ACCEL_ROCM);
    CHECK_FAILS(coh_accel_parse("tpu", &a), COH_ERR_INVALID,
                "invalid accelerator 'tpu': expected one of auto, cpu, cuda, gpu, mps, hpu, xpu, rocm");
    CHECK_STR(coh_accel_name(COH_ACCEL_XPU), "xpu");
}

static const char *select_value(const coh_inventory *inv, const coh_vis_env *e, coh_accel a,
                                const char *spec)
{
    static char buf[1200];
    coh_selection s;
    if (coh_devices_select(inv, e, a, spec, &s) != COH_OK)
        return NULL;
    snprintf(buf, sizeof buf, "%s=%s", s.var ? s.var : "cpu", s.var ? s.value : "");
    coh_selection_release(&s);
    return buf;
}

/* The child's variable must make it see exactly the chosen devices, in the child's own
 * enumeration: checked by recomputing visibility with that value. */
static void child_values(void)
{
    coh_inventory *inv = load_inv("mixed.json");
    coh_vis_env e = {0};
    e.cuda_visible_devices = "2,0,1"; /* FASTEST_FIRST: physical 2, 3, 1 */
    CHECK_STR(select_value(inv, &e, COH_ACCEL_CUDA, "2,0"), "CUDA_VISIBLE_DEVICES=1,2");
    coh_vis_env child = {0};
    child.cuda_visible_devices = "1,2";
    CHECK_STR(see(inv, COH_ACCEL_CUDA, &child, NULL), "1,2");
    coh_visible v;
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_CUDA, &e, &v));
    CHECK_STR(describe(inv, &v), "2,3,1");
    const char *var;
    char value[256];
    int pick[] = {2, 0};
    CHECK_OK(coh_child_env(inv, &v, &e, pick, 2, COH_ID_UUID, &var, value, sizeof value));
    CHECK_STR(value, "GPU-11111111-a100-0000-0000-000000000000,"
                     "GPU-22222222-t400-0000-0000-000000000000");
    int bad[] = {5};
    CHECK_FAILS(coh_child_env(inv, &v, &e, bad, 1, COH_ID_INDEX, &var, value, sizeof value),
                COH_ERR_INVALID, "device 5 is not visible (visible: 0 to 2)");
    coh_visible_release(&v);
    e.cuda_device_order = "PCI_BUS_ID";
    e.cuda_visible_devices = NULL;
    CHECK_STR(select_value(inv, &e, COH_ACCEL_CUDA, "3"), "CUDA_VISIBLE_DEVICES=0,1,2");
    CHECK_STR(select_value(inv, &e, COH_ACCEL_CPU, "3"), "cpu=");
    CHECK(select_value(inv, &e, COH_ACCEL_CUDA, "0") == NULL);
    coh_inventory_destroy(inv);

    inv = load_inv("mig.json");
    coh_vis_env m = {0};
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_CUDA, &(coh_vis_env){.cuda_visible_devices =
                                     "MIG-11119999,1"}, &v));
    int both[] = {0, 1};
    CHECK_OK(coh_child_env(inv, &v, &m, both, 2, COH_ID_INDEX, &var, value, sizeof value));
    CHECK_STR(value, "MIG-11119999-2222-3333-4444-555555555555,1"); /* MIG always as uuid */
    coh_visible_release(&v);
    coh_inventory_destroy(inv);

    inv = load_inv("intel.json");
    coh_vis_env z = {0};
    z.ze_flat_device_hierarchy = "COMPOSITE";
    z.ze_affinity_mask = "3,1.1,0";
    CHECK_STR(select_value(inv, &z, COH_ACCEL_XPU, "[2, 1]"), "ZE_AFFINITY_MASK=1.1,3");
    CHECK_STR(select_value(inv, &z, COH_ACCEL_AUTO, "1"), "ZE_AFFINITY_MASK=0");
    coh_inventory_destroy(inv);

    inv = load_inv("amd.json");
    coh_vis_env r = {0};
    r.rocr_visible_devices = "3,1,2";
    r.hip_visible_devices = "2,0";
    /* visible: physical 2, 3; the child keeps ROCR, so HIP indexes ROCR's list */
    CHECK_STR(select_value(inv, &r, COH_ACCEL_ROCM, "1"), "HIP_VISIBLE_DEVICES=2");
    CHECK_STR(select_value(inv, &r, COH_ACCEL_ROCM, "-1"), "HIP_VISIBLE_DEVICES=2,0");
    coh_inventory_destroy(inv);
}

int main(void)
{
    RUN(lightning_table);
    RUN(spec_errors);
    RUN(cpu_processes);
    RUN(accelerators);
    RUN(child_values);
    return CHECK_REPORT();
}
