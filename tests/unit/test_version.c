/* test_version.c: the version macros of cohort/version.h agree with each other and with what the
 * library says at run time (coh_version, coh_version_number). */
#include <stdio.h>

#include "check.h"
#include "cohort/version.h"

static void test_macros_agree(void)
{
    char text[32];
    snprintf(text, sizeof text, "%d.%d.%d", COH_VERSION_MAJOR, COH_VERSION_MINOR,
             COH_VERSION_PATCH);
    CHECK_STR(COH_VERSION_STRING, text);
    CHECK_INT(COH_VERSION_NUMBER,
              COH_VERSION_MAJOR * 10000 + COH_VERSION_MINOR * 100 + COH_VERSION_PATCH);
    CHECK(COH_VERSION_MINOR < 100 && COH_VERSION_PATCH < 100);
#if COH_VERSION_NUMBER < 100 /* usable in #if: at least 0.1.0 */
    CHECK(!"COH_VERSION_NUMBER below 0.1.0");
#endif
}

static void test_library_agrees(void)
{
    CHECK_STR(coh_version(), COH_VERSION_STRING);
    CHECK_INT(coh_version_number(), COH_VERSION_NUMBER);
}

int main(void)
{
    RUN(test_macros_agree);
    RUN(test_library_agrees);
    return CHECK_REPORT();
}
