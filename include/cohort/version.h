/* version.h: the version of the cohort headers a program compiles against (macros) and of the
 * libcohort it runs on (functions), so that a program can check both. */
#ifndef COHORT_VERSION_H
#define COHORT_VERSION_H

/* The one place the version is written: CMakeLists.txt reads the project's version from here. */
#define COH_VERSION_MAJOR 0
#define COH_VERSION_MINOR 1
#define COH_VERSION_PATCH 0
#define COH_VERSION_STRING "0.1.0"
/* One number that grows with every release, for #if: major * 10000 + minor * 100 + patch
 * (minor and patch stay below 100). */
#define COH_VERSION_NUMBER (COH_VERSION_MAJOR * 10000 + COH_VERSION_MINOR * 100 + COH_VERSION_PATCH)

#ifdef __cplusplus
extern "C" {
#endif

/* The running library's version ("0.1.0"): COH_VERSION_STRING of the headers it was built from. */
const char *coh_version(void);
/* The running library's COH_VERSION_NUMBER. While the major version is 0, a program built on
 * headers of another minor version may not work with it. */
int coh_version_number(void);

#ifdef __cplusplus
}
#endif
#endif
