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
           "  -o, --output FILE   the file to write (atomically; not CKPT itself)\n"
           "  --dtype D           fp32 (default) or bf16 (rounded to nearest even)\n");
}

/* 1 when a and b name the same existing file, or the same text. */
static int same_file(const char *a, const char *b)
{
    char ra[PATH_MAX], rb[PATH_MAX];
    if (!strcmp(a, b))
        return 1;
    return realpath(a, ra) && realpath(b, rb) && !strcmp(ra, rb);
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
    if (same_file(ckpt, out))
        return cli_usage_error(CMD, "invalid -o '%s': it is the checkpoint itself; name "
                               "another file", out);
    coh_status st = coh_ckpt_export(ckpt, out, dtype);
    return st ? cli_fail(CMD, st) : CLI_OK;
}
