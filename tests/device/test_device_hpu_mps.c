/* test_device_hpu_mps.c: HABANA_VISIBLE_MODULES per rule (valid, invalid, repeated, out of
 * range, empty) on Gaudi inventories, Apple MPS, and Lightning's accelerator words against the
 * expectations of Lightning's own tests. */
#include "check.h"
#include "dev_test.h"

/* The module ids hpu:0, hpu:1, ... map to under `value` (NULL = unset), as "3,1"; or the
 * error message. */
static const char *modules(const coh_inventory *inv, const char *value)
{
    static char buf[512];
    coh_vis_env e = {0};
    e.habana_visible_modules = value;
    coh_visible v;
    if (coh_visible_compute(inv, COH_ACCEL_HPU, &e, &v) != COH_OK) {
        snprintf(buf, sizeof buf, "error: %s", coh_last_error());
        return buf;
    }
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < v.count; i++)
        len += (size_t)snprintf(buf + len, sizeof buf - len, "%s%d", i ? "," : "",
                                inv->gpus[v.dev[i].gpu].module_id);
    coh_visible_release(&v);
    return buf;
}

typedef struct hpu_case {
    const char *rule, *value, *want; /* want: module ids, or a part of the error */
} hpu_case;

/* gaudi.json: 8 modules whose module ids are not in PCI order (hl-smi index 1 is module 4),
 * as on the HLS-Gaudi2 servers in Habana's multi-tenancy guide. */
static const hpu_case gaudi_cases[] = {
    {"valid", NULL, "0,1,2,3,4,5,6,7"}, /* unset: local rank N takes module N */
    {"valid", "2,3", "2,3"},
    {"valid", "3,2", "3,2"}, /* the list's order is the local ranks' order */
    {"valid", "7", "7"},
    {"valid", "4,0,6", "4,0,6"},
    {"valid", "0,1,2,3,4,5,6,7", "0,1,2,3,4,5,6,7"},
    {"invalid", "a", "error: invalid HABANA_VISIBLE_MODULES='a': entry 1 'a' is not a module id"},
    {"invalid", "1,x", "entry 2 'x' is not a module id (a number without sign or spaces; "
                       "module ids here: 0,1,2,3,4,5,6,7)"},
    {"invalid", "-1", "entry 1 '-1' is not a module id"},
    {"invalid", "+1", "entry 1 '+1' is not a module id"},
    {"invalid", "0, 1", "entry 2 ' 1' is not a module id"},
    {"invalid", "1.0", "entry 1 '1.0' is not a module id"},
    {"invalid", "0x1", "entry 1 '0x1' is not a module id"},
    {"repeated", "1,1", "entry 2 repeats module 1; each module may be listed once"},
    {"repeated", "0,2,0", "entry 3 repeats module 0"},
    {"out of range", "8", "entry 1 '8' is not a module id of this machine (module ids here: "
                          "0,1,2,3,4,5,6,7)"},
    {"out of range", "0,9", "entry 2 '9' is not a module id of this machine"},
    {"out of range", "99999999999", "entry 1 '99999999999' is not a module id"},
    {"empty", "", "error: invalid HABANA_VISIBLE_MODULES='': it is empty; list module ids "
                  "separated by commas, or unset it to use every module"},
    {"empty", ",", "entry 1 is empty"},
    {"empty", "1,", "entry 2 is empty"},
    {"empty", ",1", "entry 1 is empty"},
    {"empty", "1,,2", "entry 2 is empty"},
};

/* gaudi_vm.json: a VM given modules 1,4,5,2 (in PCI order): valid ids are those, not 0..3. */
static const hpu_case vm_cases[] = {
    {"valid", NULL, "1,2,4,5"},
    {"valid", "5,1", "5,1"},
    {"out of range", "0", "entry 1 '0' is not a module id of this machine (module ids here: "
                          "1,2,4,5)"},
    {"out of range", "1,3", "entry 2 '3' is not a module id of this machine"},
    {"repeated", "4,4", "repeats module 4"},
    {"empty", "", "it is empty"},
};

static void run_cases(const char *file, const hpu_case *c, size_t n)
{
    coh_inventory *inv = load_inv(file);
    for (size_t i = 0; i < n; i++) {
        const char *got = modules(inv, c[i].value);
        int is_err = !strncmp(got, "error: ", 7);
        int want_err = strchr(c[i].want, ' ') != NULL;
        if (is_err != want_err || (want_err ? !strstr(got, c[i].want) : strcmp(got, c[i].want))) {
            fprintf(stderr, "%s %s HABANA_VISIBLE_MODULES='%s': got '%s', want '%s'\n", file,
                    c[i].rule, c[i].value ? c[i].value : "(unset)", got, c[i].want);
            check_failures++;
        }
    }
    coh_inventory_destroy(inv);
}

static void hpu_rules(void)
{
    run_cases("gaudi.json", gaudi_cases, sizeof gaudi_cases / sizeof gaudi_cases[0]);
    run_cases("gaudi_vm.json", vm_cases, sizeof vm_cases / sizeof vm_cases[0]);
    coh_inventory *none = load_inv("four_a100.json"); /* no Gaudi: every id is out of range */
    CHECK_STR(modules(none, NULL), "");
    CHECK(strstr(modules(none, "0"), "(module ids here: none)") != NULL);
    coh_inventory_destroy(none);
}

static const char *select_value(const char *file, const char *hvm, coh_accel a, const char *spec)
{
    static char buf[1200];
    coh_inventory *inv = load_inv(file);
    coh_vis_env e = {0};
    e.habana_visible_modules = hvm;
    coh_selection s;
    if (coh_devices_select(inv, &e, a, spec, &s) != COH_OK)
        snprintf(buf, sizeof buf, "error: %s", coh_last_error());
    else
        snprintf(buf, sizeof buf, "%s:%s=%s", coh_accel_name(s.accel),
                 s.var ? s.var : "(none)", s.value);
    coh_selection_release(&s);
    coh_inventory_destroy(inv);
    return buf;
}

/* The child's HABANA_VISIBLE_MODULES lists module ids in the chosen order; recomputing with
 * that value gives the same modules. Lightning's HPU accelerator takes a count, not indices
 * (tests_pytorch/accelerators/test_hpu.py, test_hpu_unsupported_device_type: devices=[1] is
 * "`devices` for `HPUAccelerator` must be int, string or None"). */
static void hpu_selection(void)
{
    CHECK_STR(select_value("gaudi.json", NULL, COH_ACCEL_HPU, "3"),
              "hpu:HABANA_VISIBLE_MODULES=0,1,2");
    CHECK_STR(select_value("gaudi.json", "5,1,3", COH_ACCEL_HPU, "2"),
              "hpu:HABANA_VISIBLE_MODULES=5,1");
    CHECK_STR(select_value("gaudi.json", "5,1,3", COH_ACCEL_HPU, "-1"),
              "hpu:HABANA_VISIBLE_MODULES=5,1,3");
    CHECK_STR(select_value("gaudi.json", NULL, COH_ACCEL_HPU, "8"),
              "hpu:HABANA_VISIBLE_MODULES=0,1,2,3,4,5,6,7");
    coh_inventory *inv = load_inv("gaudi.json");
    CHECK_STR(modules(inv, "5,1"), "5,1");
    coh_inventory_destroy(inv);
    CHECK(strstr(select_value("gaudi.json", NULL, COH_ACCEL_HPU, "[1]"),
                 "invalid device spec '[1]' for accelerator hpu: give a number of devices "
                 "(1 to 8, -1 or auto), not indices") != NULL);
    CHECK(strstr(select_value("gaudi.json", NULL, COH_ACCEL_HPU, "1,3"), "not indices") != NULL);
    CHECK(strstr(select_value("gaudi.json", "2,3", COH_ACCEL_HPU, "3"),
                 "3 hpu devices requested but 2 are visible") != NULL);
    CHECK(strstr(select_value("gaudi.json", "2,2", COH_ACCEL_HPU, "1"), "repeats module 2"));
}

/* Lightning's words and errors. Each case names the Lightning test whose expectation it
 * follows (tests_pytorch/trainer/connectors/test_accelerator_connector.py unless noted). */
static void lightning_words(void)
{
    static const char *const words[] = {"cpu", "gpu", "cuda", "mps", "hpu", "xpu", "auto"};
    coh_accel a;
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++) {
        CHECK_OK(coh_accel_parse(words[i], &a));
        CHECK_STR(coh_accel_name(a), words[i]);
    }
    /* test_accelerator_invalid_choice: an unknown word is an error naming it */
    CHECK_FAILS(coh_accel_parse("invalid", &a), COH_ERR_INVALID, "invalid accelerator "
                "'invalid': expected one of auto, cpu, cuda, gpu, mps, hpu, xpu, rocm");
    /* test_gpu_accelerator_backend_choice_cuda: gpu is cuda without MPS */
    CHECK_STR(select_value("four_a100.json", NULL, COH_ACCEL_GPU, "1"),
              "cuda:CUDA_VISIBLE_DEVICES=0");
    /* test_gpu_accelerator_backend_choice_mps: gpu is mps on a Mac */
    CHECK_STR(select_value("mac.json", NULL, COH_ACCEL_GPU, "1"), "mps:(none)=");
    /* test_gpu_accelerator_misconfiguration_exception: no MPS and no CUDA */
    CHECK(strstr(select_value("gaudi.json", NULL, COH_ACCEL_GPU, "1"),
                 "accelerator 'gpu' found no supported gpu backend (mps or cuda): no cuda "
                 "device is visible") != NULL);
    /* test_accelerator_cpu: cuda on a machine without it names what is there */
    CHECK(strstr(select_value("gaudi.json", NULL, COH_ACCEL_CUDA, "auto"),
                 "accelerators available here: cpu, hpu") != NULL);
    /* test_connector_auto_selection: cpu without accelerators, cuda with CUDA, mps on a Mac */
    CHECK_STR(select_value("mac.json", NULL, COH_ACCEL_AUTO, "auto"), "mps:(none)=");
    CHECK_STR(select_value("four_a100.json", NULL, COH_ACCEL_AUTO, "auto"),
              "cuda:CUDA_VISIBLE_DEVICES=0,1,2,3");
    /* Lightning 1.x's _choose_auto_accelerator: hpu before mps and cuda */
    CHECK_STR(select_value("gaudi_nvidia.json", NULL, COH_ACCEL_AUTO, "auto"),
              "hpu:HABANA_VISIBLE_MODULES=0,1");
    /* test_passing_zero_and_empty_list_to_devices_flag: "0", 0 and [] for cpu, cuda, mps
     * (and hpu) are errors */
    static const struct { const char *file; coh_accel a; } zero[] = {
        {"four_a100.json", COH_ACCEL_CPU}, {"four_a100.json", COH_ACCEL_CUDA},
        {"mac.json", COH_ACCEL_MPS}, {"gaudi.json", COH_ACCEL_HPU}};
    for (size_t i = 0; i < sizeof zero / sizeof zero[0]; i++) {
        CHECK(!strncmp(select_value(zero[i].file, NULL, zero[i].a, "0"), "error: ", 7));
        CHECK(!strncmp(select_value(zero[i].file, NULL, zero[i].a, "[]"), "error: ", 7));
    }
}

/* tests_pytorch/accelerators/test_mps.py: one device (num_devices == 1); devices 1, [0] and
 * "-1" work (test_single_gpu_model); asking for 2 is "You requested gpu: [0, 1] But your
 * machine only has: [0]" (fabric device_parser._sanitize_gpu_ids). */
static void mps_device(void)
{
    CHECK_STR(select_value("mac.json", NULL, COH_ACCEL_MPS, "1"), "mps:(none)=");
    CHECK_STR(select_value("mac.json", NULL, COH_ACCEL_MPS, "[0]"), "mps:(none)=");
    CHECK_STR(select_value("mac.json", NULL, COH_ACCEL_MPS, "-1"), "mps:(none)=");
    CHECK(strstr(select_value("mac.json", NULL, COH_ACCEL_MPS, "2"),
                 "2 mps devices requested but 1 are visible") != NULL);
    CHECK(strstr(select_value("mac.json", NULL, COH_ACCEL_MPS, "[1]"),
                 "index 1 is out of range (visible mps devices: 0 to 0)") != NULL);
    /* elsewhere: MPS exists only on macOS; auto is not an error */
    CHECK(strstr(select_value("four_a100.json", NULL, COH_ACCEL_MPS, "1"),
                 "no mps device: Apple MPS exists only on macOS on Apple silicon") != NULL);
    CHECK_STR(select_value("gaudi.json", NULL, COH_ACCEL_AUTO, "1"),
              "hpu:HABANA_VISIBLE_MODULES=0");
    coh_inventory *inv = load_inv("mac.json");
    coh_visible v;
    coh_vis_env e = {0};
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_MPS, &e, &v));
    CHECK_INT(v.count, 1);
    const char *var = "x";
    char value[16] = "x";
    int zero = 0;
    CHECK_OK(coh_child_env(inv, &v, &e, &zero, 1, COH_ID_INDEX, &var, value, sizeof value));
    CHECK(var == NULL);
    CHECK_STR(value, "");
    coh_visible_release(&v);
    coh_inventory_destroy(inv);
}

/* Inventory entries for the new vendors, and their errors. */
static void inventory_entries(void)
{
    coh_inventory *inv = load_inv("gaudi.json");
    CHECK_INT(inv->ngpus, 8);
    CHECK_INT(inv->gpus[1].vendor, COH_VENDOR_HABANA);
    CHECK_INT(inv->gpus[1].module_id, 4);
    CHECK_INT(inv->gpus[1].physical_index, 1);
    CHECK_STR(inv->gpus[1].pci_bus_id, "00000000:1A:00.0");
    coh_inventory_destroy(inv);
    static const struct { const char *doc, *msg; } bad[] = {
        {"{\"gpus\": [{\"vendor\": \"habana\", \"name\": \"g\", \"uuid\": \"a\", "
         "\"memory_total_mib\": 1}]}", "t.json: gpus[0].module_id: missing (an integer from 0 "
         "to 1023 is required)"},
        {"{\"gpus\": [{\"vendor\": \"habana\", \"name\": \"g\", \"uuid\": \"a\", \"module_id\": "
         "-1, \"memory_total_mib\": 1}]}", "gpus[0].module_id: -1 is not an integer from 0"},
        {"{\"gpus\": [{\"vendor\": \"nvidia\", \"name\": \"g\", \"uuid\": \"GPU-a\", "
         "\"module_id\": 0, \"memory_total_mib\": 1}]}", "gpus[0].module_id: only habana "
         "devices have a module id"},
        {"{\"gpus\": [{\"vendor\": \"habana\", \"name\": \"g\", \"uuid\": \"a\", \"module_id\": "
         "3, \"memory_total_mib\": 1}, {\"vendor\": \"habana\", \"name\": \"g\", \"uuid\": \"b\","
         " \"module_id\": 3, \"memory_total_mib\": 1}]}",
         "gpus[1].module_id: 3 is also the module id of gpus[0]"},
        {"{\"gpus\": [{\"vendor\": \"apple\", \"name\": \"m\", \"uuid\": \"a\", "
         "\"memory_total_mib\": 1}, {\"vendor\": \"apple\", \"name\": \"m\", \"uuid\": \"b\", "
         "\"memory_total_mib\": 1}]}", "gpus[1].vendor: 'apple' again: a Mac has one MPS device"},
        {"{\"gpus\": [{\"vendor\": \"gaudi\", \"name\": \"m\", \"uuid\": \"a\", "
         "\"memory_total_mib\": 1}]}", "nvidia, intel, amd, habana, apple"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        coh_inventory *x = NULL;
        CHECK_FAILS(coh_inventory_parse(bad[i].doc, strlen(bad[i].doc), "t.json", &x),
                    COH_ERR_INVALID, bad[i].msg);
        coh_inventory_destroy(x);
    }
}

int main(void)
{
    RUN(hpu_rules);
    RUN(hpu_selection);
    RUN(lightning_words);
    RUN(mps_device);
    RUN(inventory_entries);
    return CHECK_REPORT();
}
