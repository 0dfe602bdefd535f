/* test_device_visible.c: visibility and order as CUDA, Level Zero and ROCm apply them: every
 * example of the accelerator-selection guide and CUDA's rules (truncation, uuid prefixes,
 * duplicates, MIG), all through inventory files. */
#include "check.h"
#include "dev_test.h"

static const char *cuda(const coh_inventory *inv, const char *cvd, const char *order)
{
    coh_vis_env e = {0};
    e.cuda_visible_devices = cvd;
    e.cuda_device_order = order;
    return see(inv, COH_ACCEL_CUDA, &e, NULL);
}

static coh_cut_reason cuda_cut(const coh_inventory *inv, const char *cvd, char *note, size_t cap)
{
    coh_vis_env e = {0};
    coh_visible v;
    e.cuda_visible_devices = cvd;
    e.cuda_device_order = "PCI_BUS_ID";
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_CUDA, &e, &v));
    coh_cut_reason r = v.cut;
    snprintf(note, cap, "%s", v.cut_note);
    coh_visible_release(&v);
    return r;
}

/* The guide: 4 accelerators; 0,2 -> cuda:0 = 0, cuda:1 = 2; 2,0 reverses; empty = none. */
static void guide_cuda_examples(void)
{
    coh_inventory *inv = load_inv("four_a100.json");
    CHECK_STR(cuda(inv, NULL, NULL), "0,1,2,3");
    CHECK_STR(cuda(inv, "0,2", NULL), "0,2");
    CHECK_STR(cuda(inv, "2,0", NULL), "2,0");
    CHECK_STR(cuda(inv, "", NULL), "");
    CHECK_STR(cuda(inv, "0,2", "PCI_BUS_ID"), "0,2");
    coh_inventory_destroy(inv);
}

/* PCI_BUS_ID matches nvidia-smi; FASTEST_FIRST puts the highest compute capability first. */
static void guide_device_order(void)
{
    coh_inventory *inv = load_inv("mixed.json"); /* V100, A100, T4, H100 in PCI order */
    CHECK_STR(cuda(inv, NULL, "PCI_BUS_ID"), "0,1,2,3");
    CHECK_STR(cuda(inv, NULL, "FASTEST_FIRST"), "3,1,2,0");
    CHECK_STR(cuda(inv, NULL, NULL), "3,1,2,0"); /* FASTEST_FIRST is the default */
    /* Indices refer to the order CUDA_DEVICE_ORDER sets. */
    CHECK_STR(cuda(inv, "0,2", NULL), "3,2");
    CHECK_STR(cuda(inv, "0,2", "PCI_BUS_ID"), "0,2");
    coh_vis_env e = {0};
    coh_visible v;
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_CUDA, &e, &v));
    CHECK(v.order_differs);
    CHECK(strstr(v.order_note, "cuda index 0 is nvidia-smi index 3") != NULL);
    coh_visible_release(&v);
    e.cuda_device_order = "PCI_BUS_ID";
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_CUDA, &e, &v));
    CHECK(!v.order_differs);
    CHECK_STR(v.order_note, "");
    coh_visible_release(&v);
    e.cuda_device_order = "SLOWEST_FIRST";
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_CUDA, &e, &v));
    CHECK(strstr(v.order_note, "'SLOWEST_FIRST' is not one of FASTEST_FIRST, PCI_BUS_ID"));
    CHECK_STR(describe(inv, &v), "3,1,2,0");
    coh_visible_release(&v);
    coh_inventory_destroy(inv);
}

/* Ties in compute capability fall to SMs x clock, then PCI order; identical GPUs keep PCI. */
static void fastest_first_ties(void)
{
    const char *text =
        "{\"cpu\":{\"cores\":1},\"gpus\":["
        "{\"vendor\":\"nvidia\",\"name\":\"a\",\"uuid\":\"GPU-a\",\"memory_total_mib\":1,"
        "\"compute_capability\":\"8.0\",\"multiprocessors\":100,\"clock_mhz\":1000},"
        "{\"vendor\":\"nvidia\",\"name\":\"b\",\"uuid\":\"GPU-b\",\"memory_total_mib\":1,"
        "\"compute_capability\":\"8.0\",\"multiprocessors\":108,\"clock_mhz\":1410},"
        "{\"vendor\":\"nvidia\",\"name\":\"c\",\"uuid\":\"GPU-c\",\"memory_total_mib\":1,"
        "\"compute_capability\":\"8.0\",\"multiprocessors\":100,\"clock_mhz\":1000}]}";
    coh_inventory *inv;
    CHECK_OK(coh_inventory_parse(text, strlen(text), "t", &inv));
    CHECK_STR(cuda(inv, NULL, NULL), "1,0,2");
    coh_inventory_destroy(inv);
    inv = load_inv("four_a100.json");
    CHECK_STR(cuda(inv, NULL, NULL), "0,1,2,3");
    coh_inventory_destroy(inv);
}

/* The list stops at the first invalid entry. */
static void cuda_truncation(void)
{
    coh_inventory *inv = load_inv("four_a100.json");
    char note[COH_DEV_NOTE_MAX];
    CHECK_STR(cuda(inv, "0,2,-1,1", "PCI_BUS_ID"), "0,2");
    CHECK_INT(cuda_cut(inv, "0,2,-1,1", note, sizeof note), COH_CUT_NEGATIVE);
    CHECK(strstr(note, "entry 3 '-1' is negative") && strstr(note, "(visible: 0,2)"));
    CHECK_STR(cuda(inv, "1,7,2", "PCI_BUS_ID"), "1");
    CHECK_INT(cuda_cut(inv, "1,7,2", note, sizeof note), COH_CUT_OUT_OF_RANGE);
    CHECK(strstr(note, "entry 2 '7' is past the last device (4 nvidia devices)"));
    CHECK_STR(cuda(inv, "-1", "PCI_BUS_ID"), "");
    CHECK_STR(cuda(inv, "3,abc,1", "PCI_BUS_ID"), "3");
    CHECK_INT(cuda_cut(inv, "3,abc,1", note, sizeof note), COH_CUT_MALFORMED);
    CHECK(strstr(note, "entry 2 'abc' is not a device index or uuid"));
    CHECK(strstr(note, "the runtime ignores it and every entry after it (visible: 3)"));
    /* CUDA reads "1gpu" as strtoul does, 1, and reads on: cohort refuses it (a typo) but does
     * not claim the list is cut there */
    CHECK_INT(cuda_cut(inv, "3,1gpu,2", note, sizeof note), COH_CUT_MALFORMED);
    CHECK(strstr(note, "entry 2 '1gpu' is not a device index or uuid; CUDA reads only its "
                       "leading number (1), as strtoul does, and reads on"));
    CHECK_STR(cuda(inv, "1,,2", "PCI_BUS_ID"), "1");
    CHECK_INT(cuda_cut(inv, "1,,2", note, sizeof note), COH_CUT_EMPTY_ENTRY);
    CHECK_STR(cuda(inv, "0,1,", "PCI_BUS_ID"), "0,1");
    CHECK_STR(cuda(inv, " 1 , 2 ", "PCI_BUS_ID"), "1,2");
    CHECK_STR(cuda(inv, "1.5", "PCI_BUS_ID"), "");
    CHECK_INT(cuda_cut(inv, "0,2", note, sizeof note), COH_CUT_NONE);
    CHECK_STR(note, "");
    coh_inventory_destroy(inv);
}

/* GPU-<uuid>: full or a unique prefix; an ambiguous or unknown prefix cuts the list. */
static void cuda_uuids(void)
{
    coh_inventory *inv = load_inv("four_a100.json");
    char note[COH_DEV_NOTE_MAX];
    CHECK_STR(cuda(inv, "GPU-77777777-0000-4106-c12f-20bd9faed9f6,0", "PCI_BUS_ID"), "3,0");
    CHECK_STR(cuda(inv, "GPU-8932,GPU-7", "PCI_BUS_ID"), "0,3");
    CHECK_STR(cuda(inv, "2,GPU-1a2b,0", "PCI_BUS_ID"), "2"); /* GPU-1a2b: devices 1 and 2 */
    CHECK_INT(cuda_cut(inv, "2,GPU-1a2b,0", note, sizeof note), COH_CUT_AMBIGUOUS);
    CHECK(strstr(note, "entry 2 'GPU-1a2b' matches several devices"));
    CHECK_STR(cuda(inv, "GPU-1a2b9,GPU-1a2b3", "PCI_BUS_ID"), "2,1");
    CHECK_STR(cuda(inv, "1,GPU-deadbeef,0", "PCI_BUS_ID"), "1");
    CHECK_INT(cuda_cut(inv, "1,GPU-deadbeef", note, sizeof note), COH_CUT_NO_MATCH);
    /* Uuids do not depend on the order; indices do. */
    coh_inventory_destroy(inv);
    inv = load_inv("mixed.json");
    CHECK_STR(cuda(inv, "GPU-00000000,1", NULL), "0,1");
    coh_inventory_destroy(inv);
}

/* CUDA trims spaces around an index but compares a uuid as written: "GPU-123, 2" is GPU-123
 * alone and " GPU-..." no device (PyTorch's parser and matcher, checked against the driver). */
static void cuda_spaces(void)
{
    coh_inventory *inv = load_inv("four_a100.json");
    char note[COH_DEV_NOTE_MAX];
    CHECK_STR(cuda(inv, "0, 1", "PCI_BUS_ID"), "0,1");
    CHECK_STR(cuda(inv, "GPU-8932, GPU-7", "PCI_BUS_ID"), "0");
    CHECK_INT(cuda_cut(inv, "GPU-8932, GPU-7", note, sizeof note), COH_CUT_SPACED_ID);
    CHECK(strstr(note, "entry 2 'GPU-7' is a uuid with spaces around it"));
    CHECK_STR(cuda(inv, " GPU-8932", "PCI_BUS_ID"), "");
    CHECK_INT(cuda_cut(inv, "GPU-8932 ,1", note, sizeof note), COH_CUT_SPACED_ID);
    coh_inventory_destroy(inv);
    inv = load_inv("mig.json");
    CHECK_STR(cuda(inv, "1, MIG-11119999", NULL), "1");
    CHECK_INT(cuda_cut(inv, "1, MIG-11119999", note, sizeof note), COH_CUT_SPACED_ID);
    coh_inventory_destroy(inv);
}

/* A device named twice, by index or uuid, makes CUDA show no device at all. */
static void cuda_duplicates(void)
{
    coh_inventory *inv = load_inv("four_a100.json");
    char note[COH_DEV_NOTE_MAX];
    CHECK_STR(cuda(inv, "0,1,0", "PCI_BUS_ID"), "");
    CHECK_INT(cuda_cut(inv, "0,1,0", note, sizeof note), COH_CUT_DUPLICATE);
    CHECK(strstr(note, "entry 3 '0' repeats a device; CUDA then shows no device at all"));
    CHECK_STR(cuda(inv, "3,GPU-7777", "PCI_BUS_ID"), "");
    /* After a cut, a repeat is never read. */
    CHECK_STR(cuda(inv, "0,-1,0", "PCI_BUS_ID"), "0");
    coh_inventory_destroy(inv);
}

/* MIG-<uuid> selects an instance; prefixes and the legacy MIG-GPU-<uuid>/gi/ci form work. */
static void cuda_mig(void)
{
    coh_inventory *inv = load_inv("mig.json");
    char note[COH_DEV_NOTE_MAX];
    CHECK_STR(cuda(inv, "MIG-11111111-2222-3333-4444-555555555555", NULL), "0/m0");
    CHECK_STR(cuda(inv, "MIG-11119999,1", NULL), "0/m1,1");
    CHECK_STR(cuda(inv, "MIG-GPU-aaaaaaaa-0000-0000-0000-000000000000/2/0", NULL), "0/m1");
    CHECK_STR(cuda(inv, "1,MIG-1111,0", NULL), "1");
    CHECK_INT(cuda_cut(inv, "1,MIG-1111,0", note, sizeof note), COH_CUT_AMBIGUOUS);
    CHECK_STR(cuda(inv, "MIG-11111111,MIG-11111111-2222", NULL), "");
    CHECK_STR(cuda(inv, "MIG-GPU-aaaaaaaa-0000-0000-0000-000000000000/7/0", NULL), "");
    CHECK_INT(cuda_cut(inv, "MIG-GPU-aaaaaaaa-0000-0000-0000-000000000000/7/0", note,
                       sizeof note), COH_CUT_NO_MATCH);
    CHECK_STR(cuda(inv, "MIG-GPU-aaaaaaaa/x", NULL), "");
    /* gpu and compute instance ids are digits: no sign, no space */
    CHECK_INT(cuda_cut(inv, "MIG-GPU-aaaaaaaa-0000-0000-0000-000000000000/+2/0", note,
                       sizeof note), COH_CUT_MALFORMED);
    CHECK_INT(cuda_cut(inv, "MIG-GPU-aaaaaaaa-0000-0000-0000-000000000000/2/ 0", note,
                       sizeof note), COH_CUT_MALFORMED);
    CHECK_INT(cuda_cut(inv, "MIG-GPU-aaaaaaaa-0000-0000-0000-000000000000/-4294967294/0", note,
                       sizeof note), COH_CUT_MALFORMED);
    coh_inventory_destroy(inv);
}

static const char *ze_in(const coh_inventory *inv, const char *hierarchy, const char *mask,
                         const char *pci)
{
    coh_vis_env e = {0};
    e.ze_flat_device_hierarchy = hierarchy;
    e.ze_affinity_mask = mask;
    e.ze_enable_pci_id_device_order = pci;
    return see(inv, COH_ACCEL_XPU, &e, NULL);
}

static const char *ze(const coh_inventory *inv, const char *mask, const char *pci)
{
    return ze_in(inv, "COMPOSITE", mask, pci);
}

/* ZE_AFFINITY_MASK selects devices and tiles; it never reorders them. */
static void level_zero(void)
{
    coh_inventory *inv = load_inv("intel.json");
    CHECK_STR(ze(inv, NULL, NULL), "0,1,2,3");
    CHECK_STR(ze(inv, "0,2", NULL), "0,2");
    CHECK_STR(ze(inv, "2,0", NULL), "0,2");
    CHECK_STR(ze(inv, "2,0", "1"), "0,2");
    CHECK_STR(ze(inv, "0", NULL), "0");
    CHECK_STR(ze(inv, "0.1", NULL), "0.1");
    CHECK_STR(ze(inv, "1.1,1.0", NULL), "1.0,1.1");
    CHECK_STR(ze(inv, "3,1.1,0.0", NULL), "0.0,1.1,3");
    CHECK_STR(ze(inv, "1,1.0", NULL), "1");
    CHECK_STR(ze(inv, "0,9,2", NULL), "0,2"); /* a missing device selects nothing */
    CHECK_STR(ze(inv, "0.5,1", NULL), "1");
    CHECK_STR(ze(inv, "1,x,2", NULL), "1"); /* malformed: stops there */
    coh_vis_env e = {0};
    coh_visible v;
    e.ze_flat_device_hierarchy = "COMPOSITE";
    e.ze_affinity_mask = "1,x,2";
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_XPU, &e, &v));
    CHECK_INT(v.cut, COH_CUT_MALFORMED);
    CHECK(strstr(v.cut_note, "ZE_AFFINITY_MASK='1,x,2': entry 2 'x'"));
    coh_visible_release(&v);
    e.ze_affinity_mask = NULL;
    e.ze_enable_pci_id_device_order = "yes";
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_XPU, &e, &v));
    CHECK(strstr(v.order_note, "ZE_ENABLE_PCI_ID_DEVICE_ORDER='yes' is not 0 or 1"));
    coh_visible_release(&v);
    coh_inventory_destroy(inv);
}

/* ZE_FLAT_DEVICE_HIERARCHY, the Level Zero specification's "Device Hierarchy" and "Affinity
 * Mask": with FLAT (and COMBINED) zeDeviceGet returns the devices without sub-devices, so each
 * tile of the four 2-tile cards is a device (0..7, card by card) and the mask counts them. */
static void level_zero_flat(void)
{
    coh_inventory *inv = load_inv("intel.json");
    CHECK_STR(ze_in(inv, "FLAT", NULL, NULL), "0.0,0.1,1.0,1.1,2.0,2.1,3.0,3.1");
    CHECK_STR(ze_in(inv, "FLAT", "1,2,7", NULL), "0.1,1.0,3.1"); /* the spec's 1, 2, 7 */
    CHECK_STR(ze_in(inv, "FLAT", "0,4", NULL), "0.0,2.0");
    CHECK_STR(ze_in(inv, "FLAT", "7,1", NULL), "0.1,3.1");        /* no reordering */
    CHECK_STR(ze_in(inv, "FLAT", "1,8,2", NULL), "0.1,1.0");      /* 8 selects nothing */
    CHECK_STR(ze_in(inv, "FLAT", "1,0.0,2", NULL), "0.1");        /* 0.0 "is not valid" */
    CHECK_STR(ze_in(inv, "COMBINED", "1,2,7", NULL), "0.1,1.0,3.1");
    CHECK_STR(ze_in(inv, NULL, "1,2,7", NULL), "0.1,1.0,3.1");    /* unset: FLAT assumed */
    coh_vis_env e = {0};
    coh_visible v;
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_XPU, &e, &v));
    CHECK(strstr(v.note, "ZE_FLAT_DEVICE_HIERARCHY is unset: cohort assumes FLAT"));
    coh_visible_release(&v);
    e.ze_flat_device_hierarchy = "FLAT";
    e.ze_affinity_mask = "0.0";
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_XPU, &e, &v));
    CHECK_INT(v.cut, COH_CUT_MALFORMED);
    CHECK_STR(v.note, "");
    coh_visible_release(&v);
    e.ze_flat_device_hierarchy = "flat";
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_XPU, &e, &v));
    CHECK(strstr(v.order_note, "ZE_FLAT_DEVICE_HIERARCHY='flat' is not one of FLAT, COMPOSITE, "
                               "COMBINED"));
    coh_visible_release(&v);
    /* The child's mask counts FLAT devices: xpu:0 and xpu:2 of the mask 1,2,7 are 1 and 7. */
    e.ze_flat_device_hierarchy = "FLAT";
    e.ze_affinity_mask = "1,2,7";
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_XPU, &e, &v));
    int pick[] = {2, 0};
    const char *var;
    char value[64];
    CHECK_OK(coh_child_env(inv, &v, &e, pick, 2, COH_ID_INDEX, &var, value, sizeof value));
    CHECK_STR(value, "1,7");
    coh_visible_release(&v);
    coh_inventory_destroy(inv);
}

static const char *rocm_cuda(const coh_inventory *inv, const char *rocr, const char *hip,
                             const char *cuda)
{
    coh_vis_env e = {0};
    e.rocr_visible_devices = rocr;
    e.hip_visible_devices = hip;
    e.cuda_visible_devices = cuda;
    return see(inv, COH_ACCEL_ROCM, &e, NULL);
}

static const char *rocm(const coh_inventory *inv, const char *rocr, const char *hip)
{
    return rocm_cuda(inv, rocr, hip, NULL);
}

/* HIP_VISIBLE_DEVICES indexes into what ROCR_VISIBLE_DEVICES left. */
static void rocm_layers(void)
{
    coh_inventory *inv = load_inv("amd.json");
    CHECK_STR(rocm(inv, NULL, NULL), "0,1,2,3");
    CHECK_STR(rocm(inv, "0,2", NULL), "0,2");
    CHECK_STR(rocm(inv, "2,0", NULL), "2,0");
    CHECK_STR(rocm(inv, NULL, "3,1"), "3,1");
    CHECK_STR(rocm(inv, "1,2,3", "2,0"), "3,1");
    CHECK_STR(rocm(inv, "3,2", "1"), "2");
    CHECK_STR(rocm(inv, "1,3", "2"), ""); /* HIP index 2 is past ROCR's two devices */
    CHECK_STR(rocm(inv, "GPU-a3a3,0", "1"), "0");
    CHECK_STR(rocm(inv, "", NULL), "");
    CHECK_STR(rocm(inv, "0,5,1", NULL), "0");
    CHECK_STR(rocm(inv, "0,0,1", NULL), "0"); /* ROCR: a repeat cuts */
    /* ROCm CLR (rocdevice.cpp): HIP reads a non-empty HIP_VISIBLE_DEVICES, else a non-empty
     * CUDA_VISIBLE_DEVICES, else lets every device through; it skips a repeated device. */
    CHECK_STR(rocm_cuda(inv, NULL, NULL, "1"), "1");
    CHECK_STR(rocm_cuda(inv, NULL, "2", "1"), "2");
    CHECK_STR(rocm_cuda(inv, NULL, "", "1"), "1");
    CHECK_STR(rocm_cuda(inv, NULL, "", NULL), "0,1,2,3");
    CHECK_STR(rocm_cuda(inv, NULL, "", ""), "0,1,2,3");
    CHECK_STR(rocm_cuda(inv, "1,2,3", NULL, "2,0"), "3,1");
    CHECK_STR(rocm(inv, NULL, "1,1,2"), "1,2");
    CHECK_STR(rocm_cuda(inv, NULL, NULL, "3,x,1"), "3");
    coh_inventory_destroy(inv);
}

/* A vendor's variable does not touch another vendor's devices; auto prefers cuda. */
static void vendors_and_auto(void)
{
    const char *text =
        "{\"cpu\":{\"cores\":4},\"gpus\":["
        "{\"vendor\":\"intel\",\"name\":\"i\",\"uuid\":\"i0\",\"memory_total_mib\":1},"
        "{\"vendor\":\"nvidia\",\"name\":\"n\",\"uuid\":\"GPU-n0\",\"memory_total_mib\":1}]}";
    coh_inventory *inv;
    CHECK_OK(coh_inventory_parse(text, strlen(text), "t", &inv));
    coh_vis_env e = {0};
    coh_visible v;
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_AUTO, &e, &v));
    CHECK_INT(v.accel, COH_ACCEL_CUDA);
    CHECK_INT(v.count, 1);
    coh_visible_release(&v);
    e.cuda_visible_devices = "";
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_AUTO, &e, &v));
    CHECK_INT(v.accel, COH_ACCEL_XPU);
    CHECK_INT(v.count, 1);
    CHECK_INT(inv->gpus[v.dev[0].gpu].vendor, COH_VENDOR_INTEL);
    coh_visible_release(&v);
    e.ze_affinity_mask = "5";
    CHECK_OK(coh_visible_compute(inv, COH_ACCEL_AUTO, &e, &v));
    CHECK_INT(v.accel, COH_ACCEL_CPU);
    CHECK_INT(v.count, 0);
    coh_visible_release(&v);
    coh_inventory_destroy(inv);
}

int main(void)
{
    RUN(guide_cuda_examples);
    RUN(guide_device_order);
    RUN(fastest_first_ties);
    RUN(cuda_truncation);
    RUN(cuda_uuids);
    RUN(cuda_spaces);
    RUN(cuda_duplicates);
    RUN(cuda_mig);
    RUN(level_zero);
    RUN(level_zero_flat);
    RUN(rocm_layers);
    RUN(vendors_and_auto);
    return CHECK_REPORT();
}
