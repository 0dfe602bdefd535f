/* cmd_generate.c: `cohort generate`: samples text from a checkpoint, token by token. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "cli_gpt2.h"
#include "cli_train.h"
#include "cohort/data.h"
#include "cohort/train_ckpt.h"

const char cmd_generate_summary[] = "sample text from a trained checkpoint";

static const char *const CMD = "generate";

static void help(void)
{
    printf("usage: cohort generate --checkpoint FILE --prompt TEXT --tokens N [options]\n\n"
           "Continues the prompt with N sampled tokens and prints prompt and continuation.\n\n"
           "  --checkpoint FILE     safetensors weights (HF GPT-2 names)\n"
           "  --prompt TEXT         text to continue\n"
           "  --tokens N            tokens to sample (default 100)\n"
           "  --temperature X       softmax temperature, 0 = greedy (default 1.0)\n"
           "  --top-k K             sample among the K likeliest tokens, 0 = all (default 40)\n"
           "  --seed N              sampling seed (default 1)\n"
           "  --tokenizer byte|gpt2 default: the one recorded in the checkpoint, else gpt2\n");
    cli_gpt2_help();
    printf("  --heads N             heads, for checkpoints without cohort's metadata\n"
           "  --threads N           threads (default: OMP_NUM_THREADS, else all cores)\n");
}

typedef struct gen_opts {
    cli_checkpoint_opts ck;
    const char *prompt, *tokenizer, *encoder, *merges;
    long tokens, top_k, seed;
    float temperature;
} gen_opts;

static int take_option(void *ctx, int c, const char *name, const char *arg)
{
    gen_opts *o = ctx;
    (void)name;
    switch (c) {
    case 'p': o->prompt = arg; return 1;
    case 'n': return cli_parse_long(CMD, "--tokens", arg, 0, 1 << 20, &o->tokens);
    case 'T': return cli_parse_float(CMD, "--temperature", arg, 0, 100, &o->temperature);
    case 'k': return cli_parse_long(CMD, "--top-k", arg, 0, 1 << 20, &o->top_k);
    case 's': return cli_parse_long(CMD, "--seed", arg, 0, 1L << 40, &o->seed);
    case 'z': o->tokenizer = arg; return 1;
    case 'e': o->encoder = arg; return 1;
    case 'm': o->merges = arg; return 1;
    case 'v': return cli_gpt2_old_vocab(CMD, arg, &o->merges);
    case 'h': help(); return -1;
    }
    return 1;
}

static int parse(gen_opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        CLI_CHECKPOINT_OPTIONS,     {"prompt", 1, 0, 'p'},    {"tokens", 1, 0, 'n'},
        {"temperature", 1, 0, 'T'}, {"top-k", 1, 0, 'k'},     {"seed", 1, 0, 's'},
        {"tokenizer", 1, 0, 'z'},   CLI_GPT2_OPTIONS('e', 'm', 'v'),
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->tokens = 100;
    o->top_k = 40;
    o->seed = 1;
    o->temperature = 1.0f;
    int rc = cli_checkpoint_parse(CMD, argc, argv, lo, take_option, o, &o->ck);
    if (rc == CLI_OK && !o->prompt)
        return cli_usage_error(CMD, "missing --prompt TEXT");
    return rc;
}

/* The tokenizer named, else recorded, else gpt2; one that contradicts the recorded one is
 * refused: its ids would mean other text than the model learnt. Returns 0 or the exit code. */
static int make_tokenizer(const gen_opts *o, const char *recorded, coh_tokenizer **out)
{
    const char *name = o->tokenizer ? o->tokenizer : (*recorded ? recorded : "gpt2");
    if (strcmp(name, "byte") && strcmp(name, "gpt2"))
        return cli_usage_error(CMD, "invalid --tokenizer '%s': valid are byte, gpt2", name);
    if (*recorded && strcmp(name, recorded))
        return cli_usage_error(CMD, "--tokenizer %s, but '%s' was trained on %s shards: drop "
                               "--tokenizer (the recorded one is the default)", name,
                               o->ck.path, recorded);
    if (!strcmp(name, "byte")) {
        int rc = cli_gpt2_no_tables(CMD, name, o->encoder, o->merges);
        if (rc)
            return rc;
        coh_status st = coh_tokenizer_byte_create(out);
        return st ? cli_fail(CMD, st) : 0;
    }
    return cli_gpt2_open(CMD, o->encoder, o->merges, out);
}

static int cmp_desc(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return (x < y) - (x > y);
}

/* Sample from softmax(logits / temperature) restricted to the top k (scratch: V floats). */
static int32_t sample(float *logits, float *scratch, int V, const gen_opts *o, uint64_t *rng)
{
    int best = 0;
    for (int j = 1; j < V; j++)
        best = logits[j] > logits[best] ? j : best;
    if (o->temperature == 0.0f)
        return best;
    float cut = -INFINITY;
    if (o->top_k > 0 && o->top_k < V) {
        memcpy(scratch, logits, (size_t)V * sizeof *scratch);
        qsort(scratch, (size_t)V, sizeof *scratch, cmp_desc);
        cut = scratch[o->top_k - 1];
    }
    double sum = 0;
    for (int j = 0; j < V; j++) {
        scratch[j] = logits[j] >= cut ? (float)exp((logits[j] - logits[best]) / o->temperature) : 0;
        sum += scratch[j];
    }
    double u = (double)(coh_splitmix64(rng) >> 11) / 9007199254740992.0 * sum, acc = 0;
    for (int j = 0; j < V; j++)
        if ((acc += scratch[j]) > u)
            return j;
    return best;
}

/* A model smaller than its tokenizer continues a prompt whose ids all fit it; the first id
 * that does not (it has no embedding) is refused, naming it. */
static coh_status check_prompt(const coh_tokens *ids, const coh_tokenizer *tk, int vocab)
{
    for (size_t i = 0; i < ids->count; i++)
        if (ids->ids[i] >= vocab)
            return coh_errf(COH_ERR_INVALID, "prompt token id %d (token %zu of %zu) is outside "
                            "the model's %d ids (tokenizer '%s' has %zu): give a prompt whose "
                            "tokens the model was trained on", ids->ids[i], i + 1, ids->count,
                            vocab, coh_tokenizer_name(tk), coh_tokenizer_vocab_size(tk));
    return COH_OK;
}

/* The ids sampled: the model's, cut to the tokenizer's (a model larger than its tokenizer, a
 * byte model trained with the default vocabulary, must not print nothing for an id past 255).
 * A model smaller than its tokenizer (ASCII byte shards with --vocab 128) samples all its ids:
 * the head has only those outputs. */
static int sampled_ids(const coh_gpt_config *m, const coh_tokenizer *tk, const char *recorded)
{
    size_t n = coh_tokenizer_vocab_size(tk);
    if (n >= (size_t)m->vocab)
        return m->vocab;
    if (n < 1024) /* gpt2's 50257 in llm.c's padded 50304 is the usual, bytes in 50257 are not */
        fprintf(stderr, "%s %s: warning: the model has %d ids, tokenizer '%s' %zu: sampling only "
                "its ids%s\n", cli_progname, CMD, m->vocab, coh_tokenizer_name(tk), n,
                *recorded ? "" : " (a model trained on GPT-2 shards needs --tokenizer gpt2)");
    return (int)n;
}

static coh_status generate(const gen_opts *o, const coh_gpt_config *mc, coh_tokenizer *tk,
                           const char *recorded)
{
    coh_gpt_config m = *mc;
    coh_gpt *g = NULL;
    coh_tokens ids;
    coh_tokens_init(&ids);
    int V = sampled_ids(&m, tk, recorded);
    float *logits = malloc(sizeof(float) * 2 * (size_t)m.vocab);
    coh_status st = logits ? COH_OK : coh_errf(COH_ERR_NOMEM, "out of memory for logits");
    if (!st && !(st = coh_gpt_create(&m, 1, m.seq, &g)) && !(st = coh_gpt_load(g, o->ck.path)))
        st = coh_tokenizer_encode(tk, o->prompt, strlen(o->prompt), &ids);
    if (!st && ids.count == 0 && coh_tokenizer_eot(tk) >= 0)
        st = coh_tokens_push(&ids, coh_tokenizer_eot(tk));
    if (!st && ids.count == 0)
        st = coh_errf(COH_ERR_INVALID, "empty prompt: the byte tokenizer needs some text");
    if (!st)
        st = check_prompt(&ids, tk, m.vocab);
    if (!st)
        fputs(o->prompt, stdout);
    uint64_t rng = (uint64_t)o->seed;
    for (long k = 0; !st && k < o->tokens; k++) {
        size_t ctx = ids.count < (size_t)m.seq ? ids.count : (size_t)m.seq;
        if ((st = coh_gpt_next_logits(g, ids.ids + ids.count - ctx, (int)ctx, logits)))
            break;
        int32_t next = sample(logits, logits + m.vocab, V, o, &rng);
        const char *bytes;
        size_t len;
        if ((st = coh_tokens_push(&ids, next)))
            break;
        if (coh_tokenizer_token_bytes(tk, next, &bytes, &len) == COH_OK)
            fwrite(bytes, 1, len, stdout);
        fflush(stdout);
    }
    if (!st)
        putchar('\n');
    free(logits);
    coh_tokens_release(&ids);
    coh_gpt_destroy(g);
    return st;
}

int cmd_generate(int argc, char **argv)
{
    gen_opts o;
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    cli_engine_setup((int)o.ck.threads);
    coh_gpt_config m;
    char recorded[32];
    if ((rc = cli_checkpoint_config(CMD, &o.ck, &m, recorded, sizeof recorded)))
        return rc;
    coh_tokenizer *tk = NULL;
    if ((rc = make_tokenizer(&o, recorded, &tk)))
        return rc;
    coh_status st = generate(&o, &m, tk, recorded);
    coh_tokenizer_destroy(tk);
    return st ? cli_fail(CMD, st) : CLI_OK;
}
