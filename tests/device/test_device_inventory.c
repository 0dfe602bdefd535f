/* test_device_inventory.c: the inventory file: the issue's example parses field by field, and
 * every schema violation (the planner's "links" too) is an error naming the JSON path and the
 * bad value. */
#include "check.h"
#include "dev_test.h"

static const char example[] =
    "{\"cpu\": {\"cores\": 64, \"numa_nodes\": 2},\n"
    " \"gpus\": [{\"vendor\": \"nvidia\", \"name\": \"NVIDIA A100-SXM4-80GB\",\n"
    "           \"uuid\": \"GPU-8932f937-d72c-4106-c12f-20bd9faed9f6\", \"pci_bus_id\": "
    "\"00000000:07:00.0\",\n"
    "           \"memory_total_mib\": 81920, \"memory_used_mib\": 0, \"utilization_pct\": 0,\n"
    "           \"compute_mode\": \"default\", \"processes\": 0, \"compute_capability\": "
    "\"8.0\",\n"
    "           \"multiprocessors\": 108, \"clock_mhz\": 1410,\n"
    "           \"mig\": [{\"uuid\": \"MIG-...\", \"gpu_instance\": 1, \"compute_instance\": 0, "
    "\"memory_total_mib\": 9856}]}]}";

static void issue_example(void)
{
    coh_inventory *inv;
    CHECK_OK(coh_inventory_parse(example, strlen(example), "inventory.json", &inv));
    if (!inv)
        return;
    CHECK_INT(inv->cpu.cores_online, 64);
    CHECK_INT(inv->cpu.numa_nodes, 2);
    CHECK_INT(inv->cpu.cores_available, 64);
    CHECK_INT(inv->ngpus, 1);
    const coh_gpu *g = &inv->gpus[0];
    CHECK_INT(g->vendor, COH_VENDOR_NVIDIA);
    CHECK_STR(g->name, "NVIDIA A100-SXM4-80GB");
    CHECK_STR(g->uuid, "GPU-8932f937-d72c-4106-c12f-20bd9faed9f6");
    CHECK_STR(g->pci_bus_id, "00000000:07:00.0");
    CHECK_INT(g->memory_total_mib, 81920);
    CHECK_INT(g->compute_mode, COH_COMPUTE_DEFAULT);
    CHECK_INT(g->cc_major, 8);
    CHECK_INT(g->cc_minor, 0);
    CHECK_INT(g->multiprocessors, 108);
    CHECK_INT(g->clock_mhz, 1410);
    CHECK_INT(g->physical_index, 0);
    CHECK_INT(g->nmig, 1);
    CHECK_STR(g->mig[0].uuid, "MIG-...");
    CHECK_INT(g->mig[0].gpu_instance, 1);
    CHECK_INT(g->mig[0].memory_total_mib, 9856);
    CHECK(strstr(inv->source, "inventory.json") != NULL);
    coh_inventory_destroy(inv);
}

/* Defaults, the short pci domain, physical indices per vendor, owners, tiles. */
static void optional_fields(void)
{
    const char *t = "{\"cpu\":{\"cores\":8,\"cores_available\":3},\"gpus\":["
                    "{\"vendor\":\"intel\",\"name\":\"i\",\"uuid\":\"x\",\"memory_total_mib\":9,"
                    "\"tiles\":2,\"pci_bus_id\":\"0000:0a:00.0\"},"
                    "{\"vendor\":\"nvidia\",\"name\":\"n\",\"uuid\":\"GPU-1\",\"memory_total_mib\":5,"
                    "\"processes\":2,\"process_owners\":[\"alice\",\"bob\"],"
                    "\"compute_mode\":\"exclusive_process\"},"
                    "{\"vendor\":\"nvidia\",\"name\":\"m\",\"uuid\":\"GPU-2\",\"memory_total_mib\":5}]}";
    coh_inventory *inv;
    CHECK_OK(coh_inventory_parse(t, strlen(t), "x.json", &inv));
    if (!inv)
        return;
    CHECK_INT(inv->cpu.cores_available, 3);
    CHECK_INT(inv->cpu.numa_nodes, 1);
    CHECK_STR(inv->gpus[0].pci_bus_id, "00000000:0A:00.0");
    CHECK_INT(inv->gpus[0].tiles, 2);
    CHECK_INT(inv->gpus[0].physical_index, 0);
    CHECK_INT(inv->gpus[1].physical_index, 0);
    CHECK_INT(inv->gpus[2].physical_index, 1);
    CHECK_STR(inv->gpus[1].owners, "alice,bob");
    CHECK_INT(inv->gpus[1].compute_mode, COH_COMPUTE_EXCLUSIVE_PROCESS);
    CHECK_INT(inv->gpus[2].tiles, 1);
    CHECK_INT(inv->gpus[2].utilization_pct, 0);
    coh_inventory_destroy(inv);
    /* Without a cpu block the CPU is probed. */
    const char *nocpu = "{\"gpus\": []}";
    CHECK_OK(coh_inventory_parse(nocpu, strlen(nocpu), "y.json", &inv));
    if (inv)
        CHECK(inv->cpu.cores_online >= 1 && inv->ngpus == 0);
    coh_inventory_destroy(inv);
}

/* Replace the first `from` in the example by `to` and parse; the error must contain `want`. */
static void bad(const char *from, const char *to, const char *want)
{
    char text[4096];
    const char *at = strstr(example, from);
    if (!at) {
        fprintf(stderr, "test bug: '%s' not in the example\n", from);
        CHECK(0);
        return;
    }
    snprintf(text, sizeof text, "%.*s%s%s", (int)(at - example), example, to,
             at + strlen(from));
    coh_inventory *inv = NULL;
    CHECK_FAILS(coh_inventory_parse(text, strlen(text), "inventory.json", &inv), COH_ERR_INVALID,
                want);
    CHECK(inv == NULL);
}

static void schema_errors(void)
{
    bad("\"compute_mode\": \"default\"", "\"compute_mode\": \"shared\"",
        "inventory.json: gpus[0].compute_mode: 'shared' is not one of default, "
        "exclusive_process, prohibited");
    bad("\"vendor\": \"nvidia\"", "\"vendor\": \"ati\"",
        "inventory.json: gpus[0].vendor: 'ati' is not one of nvidia, intel, amd");
    bad("\"memory_total_mib\": 81920", "\"memory_total_mib\": -5",
        "gpus[0].memory_total_mib: -5 is not an integer from 1 to");
    bad("\"memory_total_mib\": 81920", "\"memory_total_mib\": \"80GB\"",
        "gpus[0].memory_total_mib: '80GB' is not an integer");
    bad("\"memory_used_mib\": 0", "\"memory_used_mib\": 90000",
        "gpus[0].memory_used_mib: 90000 is not an integer from 0 to 81920");
    bad("\"utilization_pct\": 0", "\"utilization_pct\": 101",
        "gpus[0].utilization_pct: 101 is not an integer from 0 to 100");
    bad("\"utilization_pct\": 0", "\"utilization_pct\": 1.5", "utilization_pct: 1.5 is not");
    bad("\"compute_capability\": \"8.0\"", "\"compute_capability\": \"eight\"",
        "gpus[0].compute_capability: 'eight' is not a compute capability");
    bad("\"pci_bus_id\": \"00000000:07:00.0\"", "\"pci_bus_id\": \"7:0.0\"",
        "gpus[0].pci_bus_id: '7:0.0' is not a pci bus id");
    bad("\"uuid\": \"GPU-8932", "\"uuid\": \"8932",
        "gpus[0].uuid: '8932f937-d72c-4106-c12f-20bd9faed9f6' does not start with 'GPU-'");
    bad("\"name\": \"NVIDIA A100-SXM4-80GB\",", "",
        "gpus[0].name: missing (a string is required)");
    bad("\"clock_mhz\": 1410", "\"clock_mhz\": 1410, \"colour\": 1",
        "gpus[0]: unknown key 'colour' (valid keys: vendor, name,");
    bad("\"gpu_instance\": 1", "\"gpu_instance\": -1", "gpus[0].mig[0].gpu_instance: -1");
    bad("\"uuid\": \"MIG-...\"", "\"uuid\": \"GPU-x\"",
        "gpus[0].mig[0].uuid: 'GPU-x' does not start with 'MIG-'");
    bad("\"cores\": 64", "\"cores\": 0", "inventory.json: cpu.cores: 0 is not an integer from 1");
    bad("\"numa_nodes\": 2", "\"numa_nodes\": 65", "cpu.numa_nodes: 65 is not an integer from 1 "
                                                    "to 64");
    bad(" \"gpus\": [", " \"gpu\": [", "(top level): unknown key 'gpu'");
    bad("\"mig\": [", "\"tiles\": 2, \"mig\": [", "gpus[0].tiles: only intel devices have tiles");
    bad("\"processes\": 0", "\"processes\": null", "gpus[0].processes: null is not an integer");
    /* the arrays: devices (required), process owners and MIG instances (optional) */
    bad(strstr(example, ",\n \"gpus\": ["), "}",
        "inventory.json: gpus: missing (an array of devices, possibly empty, is required)");
    bad(strstr(example, " \"gpus\": ["), " \"gpus\": 5}", "inventory.json: gpus: 5 is not an "
                                                          "array of devices");
    bad("\"processes\": 0", "\"processes\": 0, \"process_owners\": \"alice\"",
        "gpus[0].process_owners: 'alice' is not an array of user names");
    bad(strstr(example, "\"mig\": ["), "\"mig\": {}}]}",
        "gpus[0].mig: an object is not an array of MIG instances");
    /* Strings reach terminals: ESC (terminal escape injection), a C1 CSI, invalid UTF-8. */
    bad("\"name\": \"NVIDIA A100-SXM4-80GB\"", "\"name\": \"A\\u001b[31mRED\"",
        "gpus[0].name: 'A?[31mRED' has a control character or invalid UTF-8 at byte 2");
    bad("\"uuid\": \"MIG-...\"", "\"uuid\": \"MIG-\\u009b2J\"",
        "gpus[0].mig[0].uuid: 'MIG-??2J' has a control character or invalid UTF-8 at byte 5");
    bad("\"name\": \"NVIDIA A100-SXM4-80GB\"", "\"name\": \"A\x9b\"",
        "gpus[0].name: 'A?' has a control character or invalid UTF-8 at byte 2");
    bad("\"processes\": 0", "\"processes\": 1, \"process_owners\": [\"\\u001b]0;x\"]",
        "gpus[0].process_owners: item 0: '?]0;x' is not a user name");
    /* the probe lists each owner once: more owners than processes is no machine's state */
    bad("\"processes\": 0", "\"processes\": 1, \"process_owners\": [\"alice\", \"bob\"]",
        "gpus[0].process_owners: 2 owners, but processes is 1");
    bad("\"processes\": 0", "\"process_owners\": [\"alice\"]",
        "gpus[0].process_owners: 1 owner, but processes is 0");
}

static void cross_checks(void)
{
    const char *dup = "{\"gpus\":[{\"vendor\":\"nvidia\",\"name\":\"a\",\"uuid\":\"GPU-1\","
                      "\"memory_total_mib\":1},{\"vendor\":\"nvidia\",\"name\":\"b\",\"uuid\":"
                      "\"GPU-1\",\"memory_total_mib\":1}]}";
    coh_inventory *inv;
    CHECK_FAILS(coh_inventory_parse(dup, strlen(dup), "i.json", &inv), COH_ERR_INVALID,
                "i.json: gpus[1].uuid: 'GPU-1' is also the uuid of gpus[0]");
    const char *order = "{\"gpus\":[{\"vendor\":\"nvidia\",\"name\":\"a\",\"uuid\":\"GPU-1\","
                        "\"memory_total_mib\":1,\"pci_bus_id\":\"00000000:09:00.0\"},"
                        "{\"vendor\":\"nvidia\",\"name\":\"b\",\"uuid\":\"GPU-2\","
                        "\"memory_total_mib\":1,\"pci_bus_id\":\"00000000:08:00.0\"}]}";
    CHECK_FAILS(coh_inventory_parse(order, strlen(order), "i.json", &inv), COH_ERR_INVALID,
                "gpus[1].pci_bus_id: '00000000:08:00.0' comes before gpus[0]");
    const char *nogpus = "{\"cpu\":{\"cores\":2}}";
    CHECK_FAILS(coh_inventory_parse(nogpus, strlen(nogpus), "i.json", &inv), COH_ERR_INVALID,
                "i.json: gpus: missing");
    CHECK_FAILS(coh_inventory_parse("[1]", 3, "i.json", &inv), COH_ERR_INVALID,
                "i.json: (top level): expected an object, got an array");
    const char *broken = "{\"gpus\":[}";
    CHECK_FAILS(coh_inventory_parse(broken, strlen(broken), "i.json", &inv), COH_ERR_INVALID,
                "i.json");
    CHECK_FAILS(coh_inventory_load("/nonexistent/inv.json", &inv), COH_ERR_NOT_FOUND,
                "cannot open inventory file '/nonexistent/inv.json'");
}

/* One nvidia GPU of 40960 MiB (compute capability cc) with the MIG instances `migs`: the
 * parse must fail with `want`, or succeed when want is NULL. */
static void mig_case(const char *cc, const char *migs, const char *want)
{
    char text[2048];
    snprintf(text, sizeof text,
             "{\"gpus\":[{\"vendor\":\"nvidia\",\"name\":\"a\",\"uuid\":\"GPU-1\","
             "\"memory_total_mib\":40960,\"compute_capability\":\"%s\",\"mig\":[%s]}]}",
             cc, migs);
    coh_inventory *inv = NULL;
    if (!want) {
        CHECK_OK(coh_inventory_parse(text, strlen(text), "i.json", &inv));
        coh_inventory_destroy(inv);
        return;
    }
    CHECK_FAILS(coh_inventory_parse(text, strlen(text), "i.json", &inv), COH_ERR_INVALID, want);
    CHECK(inv == NULL);
}

#define MIG(u, gi, ci, mib)                                                                    \
    "{\"uuid\":\"MIG-" u "\",\"gpu_instance\":" #gi ",\"compute_instance\":" #ci         \
    ",\"memory_total_mib\":" #mib "}"

/* What MIG makes physically impossible is refused, naming the device, the field and the
 * value; what an A100 40GB really shows (seven 1g.5gb instances; two compute instances
 * sharing one GPU instance) parses. */
static void mig_consistency(void)
{
    mig_case("8.0", MIG("a", 1, 0, 4864) "," MIG("b", 2, 0, 4864) "," MIG("c", 3, 0, 4864) ","
                    MIG("d", 4, 0, 4864) "," MIG("e", 5, 0, 4864) "," MIG("f", 6, 0, 4864) ","
                    MIG("g", 7, 0, 4864), NULL);
    mig_case("8.0", MIG("a", 1, 0, 19968) "," MIG("b", 1, 1, 19968), NULL);
    mig_case("8.0", MIG("a", 1, 0, 40192), NULL);
    mig_case("8.0", MIG("a", 1, 0, 9856) "," MIG("b", 2, 0, 81920),
             "i.json: gpus[0].mig[1].memory_total_mib: 81920 is more than its GPU's "
             "memory_total_mib (40960)");
    mig_case("8.0", MIG("a", 1, 0, 9856) "," MIG("b", 1, 0, 9856),
             "i.json: gpus[0].mig[1].compute_instance: 0 with gpu_instance 1 is also "
             "gpus[0].mig[0]");
    mig_case("8.0", MIG("a", 1, 0, 9856) "," MIG("b", 1, 1, 19968),
             "i.json: gpus[0].mig[1].memory_total_mib: 19968 differs from gpus[0].mig[0] (9856) "
             "of the same gpu_instance 1");
    mig_case("8.0", MIG("a", 1, 0, 19968) "," MIG("b", 1, 1, 19968) "," MIG("c", 2, 0, 19968)
                    "," MIG("d", 3, 0, 9856),
             "i.json: gpus[0].mig[3].memory_total_mib: 9856 brings the GPU instances to 49792 "
             "MiB, more than their GPU's memory_total_mib (40960)");
    mig_case("7.0", MIG("a", 1, 0, 9856),
             "i.json: gpus[0].mig: MIG instances on a GPU of compute capability 7.0; MIG needs "
             "8.0 or later");
}

/* One nvidia GPU with the "links" object `links`: the parse must fail with `want`, or succeed
 * when want is NULL and then hold the figures. */
static coh_inventory *links_case(const char *links, const char *want)
{
    char text[1024];
    snprintf(text, sizeof text,
             "{\"gpus\":[{\"vendor\":\"nvidia\",\"name\":\"a\",\"uuid\":\"GPU-1\","
             "\"memory_total_mib\":40960}],\"links\":%s}", links);
    coh_inventory *inv = NULL;
    if (!want) {
        CHECK_OK(coh_inventory_parse(text, strlen(text), "i.json", &inv));
        return inv;
    }
    CHECK_FAILS(coh_inventory_parse(text, strlen(text), "i.json", &inv), COH_ERR_INVALID, want);
    CHECK(inv == NULL);
    return NULL;
}

/* "links" is the planner's, but one schema serves every command: the device parser reads and
 * checks it, so `cohort devices` refuses the link `cohort plan` would. */
static void links(void)
{
    coh_inventory *inv = links_case("{\"intra_node\":{\"gbytes_per_s\":300,\"latency_us\":3},"
                                    "\"inter_node\":{\"gbytes_per_s\":0.15625,"
                                    "\"latency_us\":30}}", NULL);
    if (inv) {
        CHECK(inv->intra_node.gbytes_per_s == 300 && inv->intra_node.latency_us == 3);
        CHECK(inv->inter_node.gbytes_per_s == 0.15625 && inv->inter_node.latency_us == 30);
        coh_inventory_destroy(inv);
    }
    inv = links_case("{\"intra_node\":{\"gbytes_per_s\":300,\"latency_us\":0}}", NULL);
    if (inv) {
        CHECK(inv->inter_node.gbytes_per_s == 0); /* not given */
        coh_inventory_destroy(inv);
    }
    links_case("5", "i.json: links: expected an object, got 5");
    links_case("{\"inter\":{}}", "i.json: links: unknown key 'inter' (valid keys: intra_node, "
               "inter_node)");
    links_case("{\"inter_node\":{\"gbytes_per_s\":25,\"latency_us\":5,\"hops\":1}}",
               "i.json: links.inter_node: unknown key 'hops' (valid keys: gbytes_per_s, "
               "latency_us)");
    links_case("{\"inter_node\":{\"gbytes_per_s\":25}}",
               "i.json: links.inter_node.latency_us: missing (a number from 0 to 1e+07 is "
               "required)");
    links_case("{\"intra_node\":{\"gbytes_per_s\":0,\"latency_us\":3}}",
               "i.json: links.intra_node.gbytes_per_s: 0 is not a number from 1e-06 to 1e+06");
    links_case("{\"intra_node\":{\"gbytes_per_s\":\"fast\",\"latency_us\":3}}",
               "i.json: links.intra_node.gbytes_per_s: 'fast' is not a number");
    links_case("{\"inter_node\":{\"gbytes_per_s\":25,\"latency_us\":-1}}",
               "i.json: links.inter_node.latency_us: -1 is not a number from 0 to 1e+07");
    links_case("{\"inter_node\":{\"gbytes_per_s\":1e999,\"latency_us\":1}}",
               "i.json: links.inter_node.gbytes_per_s:");
}

int main(void)
{
    RUN(issue_example);
    RUN(optional_fields);
    RUN(schema_errors);
    RUN(cross_checks);
    RUN(mig_consistency);
    RUN(links);
    return CHECK_REPORT();
}
