/* cmd_export.c: `cohort export`: a checkpoint's weights as one plain Hugging Face GPT-2
 * safetensors file, for loading elsewhere. */
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cohort/train_ckpt.h"

const char cmd_export_summary[] = "a checkpoint as one plain Hugging Face GPT-2 file";

static const char *const CMD = "export";

static void help(void)
{
    printf("usage: cohort export CKPT -o FILE [--dtype fp32|bf16]\n\n"
           "Writes the weights of checkpoint CKPT (what --save wrote) as one safetensors file\n"
           "with Hugging Face GPT-2 names and metadata, naming no training state: the file\n"
           "--save-dtype would have written for the same weights. Streams tensor by tensor\n"
           "through a 4 MiB buffer.\n\n"
           "  -o, --output FILE   the file to write (atomically; not CKPT nor one of its\n"
           "                      files: state, shards)\n"
           "  --dtype D           fp32 (default) or bf16 (rounded to nearest even)\n");
}

/* Where `path` is, as its resolved folder and its name there: loc[0] the path as given (the
 * folder resolved, the name kept: a symlink itself), loc[1] the file an existing path leads
 * to (symlinks followed) when that is elsewhere. Returns how many (0: the folder does not
 * exist, so nothing there can be written over). */
#define LOC_CAP (PATH_MAX + 256)
static int locations(const char *path, char loc[2][LOC_CAP])
{
    char dir[LOC_CAP], real[PATH_MAX];
    const char *slash = strrchr(path, '/'), *name = slash ? slash + 1 : path;
    cli_folder_of(path, dir, sizeof dir);
    if (strlen(name) > 255 || !realpath(dir, real))
        return 0;
    snprintf(loc[0], sizeof loc[0], "%s%s%s", real, strcmp(real, "/") ? "/" : "", name);
    if (!realpath(path, real) || !strcmp(real, loc[0]))
        return 1;
    snprintf(loc[1], sizeof loc[1], "%s", real);
    return 2;
}

/* 1 when `out` names checkpoint `ckpt`'s commit file or one of the files its saves write or
 * remove beside it (its state, its shards, a save's temporary file: coh_ckpt_file_of, which
 * owns those name rules), compared by resolved folder so that "./", ".." and symlinked folders
 * or files do not hide it: the export's atomic rename over any of them would destroy the
 * checkpoint. *hit receives the file, resolved; *commit is 1 when it is the commit file. */
static int ckpt_file(const char *ckpt, const char *out, char hit[LOC_CAP], int *commit)
{
    char o[2][LOC_CAP], c[2][LOC_CAP];
    int no = locations(out, o), nc = locations(ckpt, c);
    for (int i = 0; i < no; i++)
        for (int j = 0; j < nc; j++) {
            const char *name = strrchr(o[i], '/') + 1, *base = strrchr(c[j], '/') + 1;
            if (name - o[i] != base - c[j] || strncmp(o[i], c[j], (size_t)(name - o[i])) ||
                !coh_ckpt_file_of(c[j], name))
                continue;
            memcpy(hit, o[i], strlen(o[i]) + 1);
            *commit = !strcmp(name, base);
            return 1;
        }
    return 0;
}

int cmd_export(int argc, char **argv)
{
    static const struct option lo[] = {{"output", 1, 0, 'o'}, {"dtype", 1, 0, 'd'},
                                       {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    const char *out = NULL, *ckpt = NULL;
    coh_st_dtype dtype = COH_ST_F32;
    opterr = 0;
    optind = 1;
    for (int c; (c = getopt_long(argc, argv, "o:h", lo, NULL)) != -1;) {
        if (c == 'h') {
            help();
            return CLI_OK;
        } else if (c == 'o') {
            out = optarg;
        } else if (c == 'd' && (!strcmp(optarg, "fp32") || !strcmp(optarg, "bf16"))) {
            dtype = optarg[0] == 'b' ? COH_ST_BF16 : COH_ST_F32;
        } else if (c == 'd') {
            return cli_usage_error(CMD, "invalid --dtype '%s': valid are fp32 and bf16", optarg);
        } else {
            return cli_bad_option(CMD, argv);
        }
    }
    if (optind < argc)
        ckpt = argv[optind++];
    if (!ckpt)
        return cli_usage_error(CMD, "missing the checkpoint: cohort export CKPT -o FILE");
    if (optind < argc)
        return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
    if (!out)
        return cli_usage_error(CMD, "missing -o FILE: the file to write");
    char hit[LOC_CAP];
    int commit = 0;
    if (!strcmp(ckpt, out) || (ckpt_file(ckpt, out, hit, &commit) && commit))
        return cli_usage_error(CMD, "invalid -o '%s': it is the checkpoint itself; name "
                               "another file", out);
    if (ckpt_file(ckpt, out, hit, &commit))
        return cli_usage_error(CMD, "invalid -o '%s': it is a file of checkpoint '%s' ('%s': "
                               "its state, a shard, or a name its saves write or remove); "
                               "name another file", out, ckpt, hit);
    coh_status st = coh_ckpt_export(ckpt, out, dtype);
    return st ? cli_fail(CMD, st) : CLI_OK;
}
