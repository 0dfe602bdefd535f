/* clock.h: the one monotonic clock of cohort, for durations, deadlines and trace timestamps. */
#ifndef COHORT_CLOCK_H
#define COHORT_CLOCK_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Nanoseconds on CLOCK_MONOTONIC: it never goes back and does not jump when the wall clock is
 * set, but its zero is arbitrary (usually boot), so only differences mean anything. Not the
 * time of day: use time() or CLOCK_REALTIME for that. Thread-safe. */
uint64_t coh_now_ns(void);

/* The same clock in seconds, with sub-microsecond resolution as a double. */
double coh_now_s(void);

#ifdef __cplusplus
}
#endif
#endif
