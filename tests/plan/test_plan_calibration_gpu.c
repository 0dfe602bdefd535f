/* test_plan_calibration_gpu.c: a GPU's calibration file (`cohort bench gemm --device cuda
 * --out`): the file measured on an H100 reads as the h100-sxm preset with its measured GEMM
 * efficiency, stream bandwidth and op overhead in place of the preset's constants and everything
 * else (peak, SMs, NVLink, memory) the preset's; the planner's price of a compute-bound product
 * scales by exactly the ratio of the efficiencies and a stream-bound op by the bandwidths; bad
 * files are refused naming the key and the value; the writer `cohort bench gemm --device cuda
 * --out` calls gives back, read again, what it was given (any machine name). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "cohort/planner.h"

static void measured_file_reads_over_its_preset(void)
{
    const char *src = getenv("COHORT_SOURCE_DIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/calibration/gpu_h100_measured.json",
             src ? src : ".");
    coh_hw cal, pre;
    CHECK_OK(coh_calibration_load(path, &cal));
    CHECK_OK(coh_hw_preset("h100-sxm", &pre));
    CHECK_INT(cal.gpu, 1);
    CHECK_STR(cal.name, "NVIDIA H100 80GB HBM3");
    CHECK(strstr(cal.source, "h100-sxm preset") != NULL);
    CHECK_NEAR(cal.gemm_efficiency, 0.7209, 1e-9);
    CHECK_NEAR(cal.rates[0].elementwise_bytes_per_s, 2748.9e9, 1e-9);
    CHECK_NEAR(cal.rates[0].op_overhead_s, 4.249e-6, 1e-9);
    /* the rest is the preset's */
    CHECK(cal.peak_flops == pre.peak_flops && cal.sms == pre.sms &&
          cal.memory_bytes == pre.memory_bytes && cal.gpus_per_node == pre.gpus_per_node &&
          cal.intra.bytes_per_s == pre.intra.bytes_per_s &&
          cal.mem_bytes_per_s == pre.mem_bytes_per_s && cal.precision == pre.precision);
    /* a large square product is compute-bound: its price less the op overhead scales by the
     * efficiencies' ratio */
    double n = 8192, tc = coh_plan_gemm_seconds(&cal, 1, 4 * n, n, n),
           tp = coh_plan_gemm_seconds(&pre, 1, 4 * n, n, n);
    CHECK_NEAR((tc - cal.rates[0].op_overhead_s) / (tp - pre.rates[0].op_overhead_s),
               pre.gemm_efficiency / cal.gemm_efficiency, 1e-9);
    /* and within its tile and wave quantization (under 2% at this size) of the flops over the
     * calibrated peak */
    double ideal = 2 * 4 * n * n * n / (cal.peak_flops * cal.gemm_efficiency);
    CHECK(tc - cal.rates[0].op_overhead_s >= ideal &&
          tc - cal.rates[0].op_overhead_s < 1.02 * ideal);
}

static coh_status parse(const char *text)
{
    coh_hw hw;
    return coh_calibration_parse(text, strlen(text), "g.json", &hw);
}

#define GOOD_GPU                                                                               \
    "\"gemm_efficiency\": 0.7, \"elementwise_gbytes_per_s\": 2700, \"op_overhead_us\": 3, "  \
    "\"gemm\": [[1e6, 1e12], [1e9, 5e14]]"

static void refuses(const char *text, const char *want)
{
    coh_status st = parse(text);
    CHECK(st == COH_ERR_INVALID);
    if (!strstr(coh_last_error(), want)) {
        printf("  error '%s' does not name '%s'\n", coh_last_error(), want);
        CHECK(0);
    }
}

#define GPU_FILE(extra_top, gpu_body)                                                          \
    "{\"cohort_calibration\": 1, \"device\": \"cuda\", \"machine\": \"m\", " extra_top       \
    "\"gpu\": {" gpu_body "}}"

static void bad_files(void)
{
    CHECK_OK(parse(GPU_FILE("", "\"preset\": \"h100-sxm\", " GOOD_GPU)));
    /* each file and what its refusal must name */
    static const char *const bad[][2] = {
        {GPU_FILE("", "\"preset\": \"h200\", " GOOD_GPU), "h200"},
        {GPU_FILE("", "\"preset\": \"h100-sxm\", \"gemm_efficiency\": 1.5, "
                      "\"elementwise_gbytes_per_s\": 2700, \"op_overhead_us\": 3, "
                      "\"gemm\": [[1e6, 1e12]]"),
         "gemm_efficiency: 1.5"},
        {GPU_FILE("\"cores\": 2, ", "\"preset\": \"h100-sxm\", " GOOD_GPU), "cores"},
        {"{\"cohort_calibration\": 1, \"device\": \"cuda\", \"machine\": \"m\"}",
         "missing 'gpu'"},
        {"{\"cohort_calibration\": 1, \"device\": \"tpu\", \"machine\": \"m\"}",
         "device: 'tpu'"},
        {GPU_FILE("", "\"preset\": \"h100-sxm\", \"sms\": 9, " GOOD_GPU), "sms"},
        /* a CPU file may not carry a GPU's section */
        {"{\"cohort_calibration\": 1, \"cores\": 2, \"gpu\": {}, \"rates\": [{\"threads\": "
         "1, \"gemm\": [[1000, 1e9]], \"elementwise_gbytes_per_s\": 1}]}",
         "gpu"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
        refuses(bad[k][0], bad[k][1]);
    /* and may say that it is one */
    CHECK_OK(parse("{\"cohort_calibration\": 1, \"device\": \"cpu\", \"cores\": 2, "
                   "\"rates\": [{\"threads\": 1, \"gemm\": [[1000, 1e9]], "
                   "\"elementwise_gbytes_per_s\": 1}]}"));
}

/* coh_gpu_calibration_write's file reads back as what was written (to 6 significant digits),
 * whatever the machine's name holds; a preset the planner lacks and an unwritable path are
 * refused. */
static void written_file_reads_back(void)
{
    char path[] = "/tmp/cohort-gpu-cal-XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    close(fd);
    coh_rate_curve sq = {3, {8388608, 67108864, 2.19902e12}, {1.46603e12, 1.0555812345e13,
                                                               7.130071234567e14}};
    const char *machine = "GPU \"quoted\" \\ back\nslash";
    double eff = 0.72094281234567, ew = 2748.91234567e9, oh = 4.24912345e-6;
    CHECK_OK(coh_gpu_calibration_write(path, machine, "h100-sxm", eff, ew, oh, &sq));
    coh_hw cal;
    CHECK_OK(coh_calibration_load(path, &cal));
    CHECK_INT(cal.gpu, 1);
    CHECK_STR(cal.name, machine);
    /* the file keeps 6 significant digits of each figure, in its units (GB/s, µs) */
    CHECK(cal.gemm_efficiency == 0.720943);
    CHECK(cal.rates[0].elementwise_bytes_per_s == 2748.91 * 1e9);
    CHECK(cal.rates[0].op_overhead_s == 4.24912 * 1e-6);
    CHECK(strstr(cal.source, "h100-sxm preset") != NULL);
    CHECK(coh_gpu_calibration_write(path, "m", "h300", eff, ew, oh, &sq) == COH_ERR_INVALID);
    CHECK(strstr(coh_last_error(), "h300") != NULL);
    CHECK(coh_gpu_calibration_write("/nonexistent/dir/cal.json", "m", "h100-sxm", eff, ew, oh,
                                    &sq) == COH_ERR_IO);
    CHECK(strstr(coh_last_error(), "/nonexistent/dir/cal.json") != NULL);
    unlink(path);
}

int main(void)
{
    RUN(measured_file_reads_over_its_preset);
    RUN(written_file_reads_back);
    RUN(bad_files);
    return CHECK_REPORT();
}
