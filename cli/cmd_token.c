/* cmd_token.c: `cohort token FILE`: a new job secret for `cohort run --job-token FILE`, written
 * owner-only, with how to hand it to the other nodes. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "cohort/launch.h"

const char cmd_token_summary[] = "make a job secret for cohort run --job-token";

static const char *const CMD = "token";

static void help(void)
{
    printf("usage: cohort token FILE\n"
           "       cohort token -\n\n"
           "Makes a new job secret (32 random bytes, as 64 hex digits) for the launchers of one\n"
           "multi-node job: FILE is created readable and writable only by you (mode 0600),\n"
           "never replacing an existing file. '-' prints the secret on stdout instead, for\n"
           "COHORT_JOB_TOKEN=$(cohort token -).\n\n"
           "Every node of the job gives the same secret: copy FILE to the other nodes with\n"
           "its mode (scp -p FILE HOST:FILE), or make it once in a directory every node\n"
           "reads as you (a shared home), then on each node:\n"
           "  cohort run --nnodes N --node-rank K --job-token FILE ...\n"
           "Under Slurm, in the batch script before srun:\n"
           "  cohort token \"$HOME/.cohort-$SLURM_JOB_ID.token\"\n"
           "(job and step ids are not secret: any user of the cluster can list them).\n");
}

int cmd_token(int argc, char **argv)
{
    static const struct option lo[] = {{"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    opterr = 0;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "+h", lo, NULL)) != -1;) {
        if (c != 'h')
            return cli_bad_option(CMD, argv);
        help();
        return CLI_OK;
    }
    if (optind >= argc)
        return cli_usage_error(CMD, "missing FILE: the file to create (or '-' for stdout)");
    if (optind + 1 < argc)
        return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind + 1]);
    const char *path = argv[optind];
    if (!strcmp(path, "-")) {
        char tok[COH_JOB_TOKEN_HEX + 2];
        coh_status st = coh_launch_new_token(tok);
        if (st)
            return cli_fail(CMD, st);
        fputs(tok, stdout);
        memset(tok, 0, sizeof tok);
        return fflush(stdout) == 0 ? CLI_OK : CLI_FAILED;
    }
    coh_status st = coh_launch_write_token(path);
    if (st)
        return cli_fail(CMD, st);
    fprintf(stderr, "%s token: wrote a new job secret to '%s' (mode 0600). Copy it to every other "
            "node of the job (scp -p %s HOST:%s) and give each launcher --job-token %s\n",
            cli_progname, path, path, path, path);
    return CLI_OK;
}
