/* test_clock.c: cohort's one monotonic clock: it never goes back, it is CLOCK_MONOTONIC, and
 * its two forms count nanoseconds and seconds (checked against nanosleep and time()). */
#include <stdint.h>
#include <time.h>

#include "check.h"
#include "cohort/clock.h"

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(long ms)
{
    struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&d, &d) != 0)
        ;
}

static void test_monotonic(void)
{
    uint64_t prev_ns = coh_now_ns();
    double prev_s = coh_now_s();
    int back = 0;
    for (int i = 0; i < 100000; i++) {
        uint64_t ns = coh_now_ns();
        double s = coh_now_s();
        back += ns < prev_ns || s < prev_s;
        prev_ns = ns;
        prev_s = s;
    }
    CHECK_INT(back, 0);
}

static void test_same_clock(void)
{
    /* the very clock CLOCK_MONOTONIC reads, in both units */
    uint64_t a = mono_ns(), n = coh_now_ns(), b = mono_ns();
    CHECK(a <= n && n <= b);
    a = mono_ns();
    double s = coh_now_s();
    b = mono_ns();
    CHECK(s >= (double)a * 1e-9 - 1e-6 && s <= (double)b * 1e-9 + 1e-6);
}

static void test_units_nanosleep(void)
{
    /* each reading of the two units is bracketed by CLOCK_MONOTONIC readings: however long a
     * loaded machine keeps this thread off the cpu between two of them, both spans lie within
     * [inner, outer] */
    uint64_t m0 = mono_ns(), n0 = coh_now_ns();
    double s0 = coh_now_s();
    uint64_t m1 = mono_ns();
    sleep_ms(50);
    uint64_t m2 = mono_ns();
    double s1 = coh_now_s();
    uint64_t n1 = coh_now_ns(), m3 = mono_ns();
    uint64_t dn = n1 - n0, inner = m2 - m1, outer = m3 - m0;
    double ds = s1 - s0;
    /* nanosleep sleeps at least as long as asked */
    CHECK(dn >= 49000000u && ds >= 0.049);
    CHECK(dn >= inner && dn <= outer);
    CHECK(ds >= (double)inner * 1e-9 - 1e-6 && ds <= (double)outer * 1e-9 + 1e-6);
}

static void test_units_time(void)
{
    /* from within one wall-clock second until two seconds later: between 1 and 2 seconds
     * pass; generous bounds for a busy machine */
    time_t t0 = time(NULL);
    double s0 = coh_now_s();
    uint64_t n0 = coh_now_ns();
    while (time(NULL) < t0 + 2)
        sleep_ms(5);
    double ds = coh_now_s() - s0;
    double dn = (double)(coh_now_ns() - n0) * 1e-9;
    CHECK(ds > 0.9 && ds < 4.0);
    CHECK(dn > 0.9 && dn < 4.0);
}

int main(void)
{
    RUN(test_monotonic);
    RUN(test_same_clock);
    RUN(test_units_nanosleep);
    RUN(test_units_time);
    return CHECK_REPORT();
}
