/* test_size.c: byte sizes as typed by users, and as printed. */
#include <stdint.h>

#include "check.h"
#include "cohort/size.h"

static void test_parse(void)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } ok[] = {
        {"0", 0},
        {"17", 17},
        {"17B", 17},
        {"1k", 1024},
        {"1KiB", 1024},
        {"1kB", 1000},
        {"16GiB", 17179869184ull},
        {"16G", 17179869184ull},
        {"10GB", 10000000000ull},
        {"1.5 GiB", 1610612736ull},
        {"512MiB", 536870912ull},
        {"80TB", 80000000000000ull},
        {"0.5", 0},
        {"9099PB", 9099000000000000000ull},
        {"8 EiB", 9223372036854775808ull},
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        uint64_t b = 1;
        CHECK_OK(coh_size_parse(ok[i].text, &b));
        if (b != ok[i].bytes) {
            fprintf(stderr, "'%s' -> %llu, expected %llu\n", ok[i].text, (unsigned long long)b,
                    (unsigned long long)ok[i].bytes);
            check_failures++;
        }
    }
}

static void test_errors(void)
{
    uint64_t b;
    CHECK_FAILS(coh_size_parse("", &b), COH_ERR_INVALID, "invalid size '': no number");
    CHECK_FAILS(coh_size_parse("-1", &b), COH_ERR_INVALID, "negative");
    CHECK_FAILS(coh_size_parse("12XB", &b), COH_ERR_INVALID, "invalid size '12XB': unknown unit");
    CHECK_FAILS(coh_size_parse("GiB", &b), COH_ERR_INVALID, "no number");
    CHECK_FAILS(coh_size_parse("1  GiB", &b), COH_ERR_INVALID, "unknown unit");
    CHECK_FAILS(coh_size_parse("99999999PB", &b), COH_ERR_INVALID, "too large");
    CHECK_FAILS(coh_size_parse("16.01EiB", &b), COH_ERR_INVALID, "too large");
    CHECK_OK(coh_size_parse("16EiB", &b));
    CHECK(b == UINT64_MAX);
    CHECK_FAILS(coh_size_parse(NULL, &b), COH_ERR_INVALID, "no text");
}

static void test_format(void)
{
    char buf[32];
    CHECK_STR(coh_size_format(0, buf, sizeof buf), "0 B");
    CHECK_STR(coh_size_format(1023, buf, sizeof buf), "1023 B");
    CHECK_STR(coh_size_format(1536, buf, sizeof buf), "1.50 KiB");
    CHECK_STR(coh_size_format(81920ull << 20, buf, sizeof buf), "80.00 GiB");
    CHECK_STR(coh_size_format_si(999, buf, sizeof buf), "999 B");
    CHECK_STR(coh_size_format_si(120000000000ull, buf, sizeof buf), "120.00 GB");
    CHECK_STR(coh_size_format_si(31406250000ull, buf, sizeof buf), "31.41 GB");
}

int main(void)
{
    RUN(test_parse);
    RUN(test_errors);
    RUN(test_format);
    return CHECK_REPORT();
}
