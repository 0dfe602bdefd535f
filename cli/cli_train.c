/* cli_train.c: option parsing and engine setup shared by the train, eval and generate commands. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_train.h"
#include "cohort/backend.h"
#include "cohort/train_ckpt.h"

void cli_engine_setup(int threads)
{
    coh_set_threads(threads); /* first: the restart's check weighs this team against the cpus */
    coh_engine_ensure_environment();
}

int cli_check_output(const char *cmd, const char *opt, const char *path)
{
    struct stat s;
    if (!*path)
        return cli_usage_error(cmd, "invalid %s '': give a file name", opt);
    if (!stat(path, &s) && S_ISDIR(s.st_mode))
        return cli_usage_error(cmd, "invalid %s '%s': it is a folder; give a file name (in it)",
                               opt, path);
    return cli_check_folder_of(cmd, opt, path);
}

int cli_model_disagrees(const char *cmd, const char *said, const char *flag, long have,
                        const char *how, const char *from, const char *drop, const char *more)
{
    return cli_usage_error(cmd, "%s disagrees with %s '%s', whose model has %s %ld: drop %s (the "
                           "checkpoint decides the model)%s", said, how, from, flag, have, drop,
                           more);
}

int cli_checkpoint_config(const char *cmd, const cli_checkpoint_opts *o, coh_gpt_config *m,
                          char *tokenizer, size_t cap)
{
    coh_status st = coh_gpt_checkpoint_config(o->path, (int)o->heads, m, tokenizer, cap);
    if (st)
        return cli_fail(cmd, st);
    char said[48];
    snprintf(said, sizeof said, "--heads %ld", o->heads);
    return o->heads && o->heads != m->heads
               ? cli_model_disagrees(cmd, said, "--heads", m->heads, "--checkpoint", o->path,
                                     "--heads", "")
               : 0;
}

/* --checkpoint, --heads, --threads: -1 when code is none of them, else as cli_option_fn. */
static int checkpoint_option(const char *cmd, int code, const char *arg, cli_checkpoint_opts *o)
{
    switch (code) {
    case 'c': o->path = arg; return 1;
    case 'H': return cli_parse_long(cmd, "--heads", arg, 1, 4096, &o->heads);
    case 't': return cli_parse_long(cmd, "--threads", arg, 1, 4096, &o->threads);
    }
    return -1;
}

typedef struct checkpoint_parse {
    const char *cmd;
    cli_checkpoint_opts *opts;
    cli_option_fn take; /* the command's own options */
    void *ctx;
} checkpoint_parse;

static int take_checkpoint_first(void *ctx, int code, const char *name, const char *arg)
{
    checkpoint_parse *p = ctx;
    int taken = checkpoint_option(p->cmd, code, arg, p->opts);
    return taken >= 0 ? taken : p->take(p->ctx, code, name, arg);
}

int cli_checkpoint_parse(const char *cmd, int argc, char **argv, const struct option *options,
                         cli_option_fn take, void *ctx, cli_checkpoint_opts *o)
{
    checkpoint_parse p = {cmd, o, take, ctx};
    int rc = cli_parse_options(cmd, argc, argv, options, take_checkpoint_first, &p);
    if (rc == CLI_OK && !o->path)
        return cli_usage_error(cmd, "missing --checkpoint FILE");
    return rc;
}

/* A /proc/self/status field ("VmRSS", "VmHWM") in bytes, 0 when unreadable. */
static uint64_t proc_status_bytes(const char *field)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kib = 0;
    size_t n = strlen(field);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, n) == 0 && line[n] == ':')
            kib = strtoull(line + n + 1, NULL, 10);
    if (f)
        fclose(f);
    return kib * 1024u;
}

uint64_t cli_peak_rss(void)
{
    uint64_t hwm = proc_status_bytes("VmHWM");
    struct rusage ru;
    if (hwm || getrusage(RUSAGE_SELF, &ru))
        return hwm;
    return (uint64_t)ru.ru_maxrss * 1024u;
}

uint64_t cli_rss_reset(void)
{
    /* "5" resets the peak resident size (proc(5), clear_refs), so the peak measured later
     * belongs to training and not to start-up work such as the sgemm probe */
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
    coh_dev_memory_reset_peak(); /* the allocator's peak restarts here too */
    return proc_status_bytes("VmRSS");
}
