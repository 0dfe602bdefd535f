/* cli_gpt2.h: the GPT-2 tokenizer options that `cohort prepare` and `cohort generate` share. */
#ifndef COHORT_CLI_GPT2_H
#define COHORT_CLI_GPT2_H

#include "cohort/data.h"

/* Their getopt_long entries; the codes are the caller's. --vocab is the old spelling of
 * --merges, kept for a file path (in `cohort train`, --vocab is the vocabulary's size). */
#define CLI_GPT2_OPTIONS(enc, merges, vocab)                                                      \
    {"encoder", 1, 0, (enc)}, {"merges", 1, 0, (merges)}, {"vocab", 1, 0, (vocab)}

/* The help lines of --encoder and --merges, for a command's --help. */
void cli_gpt2_help(void);

/* --vocab ARG: a file path takes --merges's place with a line saying so; a number is refused
 * (CLI_USAGE) with what --vocab means where. Returns 1 to go on, 0 after a usage error. */
int cli_gpt2_old_vocab(const char *cmd, const char *arg, const char **merges);

/* --encoder or --merges given with a tokenizer that reads no tables (byte): they would be
 * ignored, so CLI_USAGE naming the option and the tokenizer; 0 when neither is given. */
int cli_gpt2_no_tables(const char *cmd, const char *tokenizer, const char *encoder,
                       const char *merges);

/* The GPT-2 tokenizer from encoder.json and vocab.bpe: each NULL one from $COHORT_GPT2_DIR,
 * else from the tables scripts/setup.sh installed. Returns 0, or the exit code after printing
 * why (an unreadable table names itself and the fix). */
int cli_gpt2_open(const char *cmd, const char *encoder, const char *merges, coh_tokenizer **out);

#endif
