/* cohort.c: the cohort command-line tool: dispatches `cohort <command> [options]` to the
 * subcommands in cli/cmd_*.c (their table is generated from the file names). */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_commands.h" /* generated: cli_commands[] */
#include "cohort/log.h"
#include "cohort/status.h"

const char *cli_progname = "cohort";

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fprintf(stderr, "%s %s: error: %s\n", cli_progname, cmd, msg);
    return CLI_USAGE;
}

int cli_bad_option(const char *cmd, char *const *argv)
{
    return cli_usage_error(cmd, "unknown or incomplete option '%s' (see --help)",
                           argv[optind - 1]);
}

int cli_no_operands(const char *cmd, int argc, char *const *argv)
{
    if (optind < argc && !access(argv[optind], F_OK)) /* a glob the shell expanded */
        return cli_usage_error(cmd, "unexpected argument '%s': did the shell expand an unquoted "
                               "glob into several files? quote the pattern (--data "
                               "'dir/*.bin') or repeat the option before each file",
                               argv[optind]);
    if (optind < argc)
        return cli_usage_error(cmd, "unexpected argument '%s' (see --help)", argv[optind]);
    return CLI_OK;
}

void cli_folder_of(const char *path, char *buf, size_t cap)
{
    const char *slash = strrchr(path, '/');
    if (!slash)
        snprintf(buf, cap, ".");
    else
        snprintf(buf, cap, "%.*s", slash == path ? 1 : (int)(slash - path), path);
}

int cli_check_folder_of(const char *cmd, const char *opt, const char *path)
{
    struct stat s;
    char dir[4200];
    cli_folder_of(path, dir, sizeof dir);
    if (stat(dir, &s) && errno == ENOENT)
        return cli_usage_error(cmd, "invalid %s '%s': folder '%s' does not exist (create it)",
                               opt, path, dir);
    if (stat(dir, &s)) /* EACCES, ENOTDIR on the way */
        return cli_usage_error(cmd, "invalid %s '%s': cannot reach folder '%s': %s", opt, path,
                               dir, strerror(errno));
    if (!S_ISDIR(s.st_mode))
        return cli_usage_error(cmd, "invalid %s '%s': '%s' is not a folder", opt, path, dir);
    if (access(dir, W_OK | X_OK))
        return cli_usage_error(cmd, "invalid %s '%s': cannot write in folder '%s': %s", opt,
                               path, dir, strerror(errno));
    return CLI_OK;
}

int cli_check_input(const char *cmd, const char *opt, const char *path)
{
    struct stat s;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return cli_usage_error(cmd, "cannot read %s '%s': %s", opt, path, strerror(errno));
    int folder = !fstat(fd, &s) && S_ISDIR(s.st_mode);
    close(fd);
    if (folder)
        return cli_usage_error(cmd, "cannot read %s '%s': it is a folder, not a file", opt, path);
    return CLI_OK;
}

int cli_parse_options(const char *cmd, int argc, char **argv, const struct option *options,
                      cli_option_fn take, void *ctx)
{
    optind = 1;
    opterr = 0;
    int c, idx = -1;
    while ((c = getopt_long(argc, argv, "h", options, &idx)) != -1) {
        if (c == '?' || c == ':')
            return cli_bad_option(cmd, argv);
        int taken = take(ctx, c, idx >= 0 ? options[idx].name : NULL, optarg);
        if (taken <= 0)
            return taken < 0 ? -1 : CLI_USAGE;
        idx = -1;
    }
    return cli_no_operands(cmd, argc, argv);
}

int cli_fail(const char *cmd, coh_status s)
{
    const char *msg = coh_last_error();
    fprintf(stderr, "%s %s: error: %s\n", cli_progname, cmd, *msg ? msg : coh_status_name(s));
    return s == COH_ERR_INVALID ? CLI_USAGE : CLI_FAILED;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: cohort <command> [options]\n\n"
               "cohort: choose accelerators, launch jobs on them, and train in parallel.\n\n"
               "commands:\n");
    for (size_t i = 0; i < cli_command_count; i++)
        fprintf(f, "  %-10s %s\n", cli_commands[i].name, cli_commands[i].summary);
    fprintf(f, "\n'cohort <command> --help' describes a command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CLI_USAGE;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h") || !strcmp(name, "help")) {
        usage(stdout);
        return CLI_OK;
    }
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        printf("cohort %s\n", coh_version());
        return CLI_OK;
    }
    for (size_t i = 0; i < cli_command_count; i++) {
        if (strcmp(name, cli_commands[i].name))
            continue;
        /* the library can only warn of a COHORT_LOG typo when it first logs: refuse it here */
        const char *log = getenv("COHORT_LOG");
        coh_log_level level;
        if (log && *log && coh_log_level_parse(log, &level) != COH_OK)
            return cli_fail(name, COH_ERR_INVALID);
        return cli_commands[i].run(argc - 1, argv + 1);
    }
    fprintf(stderr, "cohort: error: unknown command '%s' (see 'cohort --help')\n", name);
    return CLI_USAGE;
}
