/* plan_test_calibration.h: the planner tests' CPU hardware: this machine's calibration as the
 * corpus keeps it (tests/fuzz/corpus/calibration/measured.json), so every run prices alike.
 * Include after check.h. */
#ifndef COHORT_PLAN_TEST_CALIBRATION_H
#define COHORT_PLAN_TEST_CALIBRATION_H

#include <stdio.h>
#include <stdlib.h>

#include "cohort/planner.h"

/* Load it into *hw; 0 (a failed check) when it cannot be read. */
static int load_cal(coh_hw *hw)
{
    char path[512];
    const char *src = getenv("COHORT_SOURCE_DIR");
    snprintf(path, sizeof path, "%s/tests/fuzz/corpus/calibration/measured.json",
             src ? src : "..");
    coh_status st = coh_calibration_load(path, hw);
    CHECK_OK(st);
    return st == COH_OK;
}

#endif
