/* comm_env_clear.h: the comm tests' way to start from an environment without any launcher's
 * variables. */
#ifndef COHORT_TESTS_COMM_ENV_CLEAR_H
#define COHORT_TESTS_COMM_ENV_CLEAR_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Remove every launcher's variables, so that the tests see only what they set. */
static inline void clear_env(void)
{
    static const char *const prefixes[] = {"COHORT_", "OMPI_", "PMI_", "SLURM_", "TORCHELASTIC_",
                                           "RANK=", "WORLD_SIZE=", "LOCAL_RANK=",
                                           "LOCAL_WORLD_SIZE=", "GROUP_RANK=", "GROUP_WORLD_SIZE=",
                                           "MPI_LOCALRANKID=", "MPI_LOCALNRANKS="};
    extern char **environ;
    for (int again = 1; again;) {
        again = 0;
        for (char **e = environ; *e && !again; e++)
            for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes && !again; i++)
                if (!strncmp(*e, prefixes[i], strlen(prefixes[i]))) {
                    char name[128];
                    size_t n = strcspn(*e, "=");
                    snprintf(name, sizeof name, "%.*s", (int)(n < 127 ? n : 127), *e);
                    unsetenv(name);
                    again = 1; /* environ changed under us: start over */
                }
    }
}

#endif
