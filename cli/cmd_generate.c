/* cmd_generate.c: `cohort generate`: samples text from a checkpoint, token by token. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
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
           "  --tokenizer byte|gpt2 default: the one recorded in the checkpoint\n"
           "  --encoder FILE        GPT-2 encoder.json (gpt2)\n"
           "  --vocab FILE          GPT-2 vocab.bpe (gpt2)\n"
           "  --heads N             heads, for checkpoints without cohort's metadata\n"
           "  --threads N           threads (default: OMP_NUM_THREADS, else all cores)\n");
}

typedef struct gen_opts {
    const char *ckpt, *prompt, *tokenizer, *encoder, *vocab;
    long tokens, top_k, seed, heads, threads;
    float temperature;
} gen_opts;

static int parse(gen_opts *o, int argc, char **argv)
{
    static const struct option lo[] = {
        {"checkpoint", 1, 0, 'c'}, {"prompt", 1, 0, 'p'},    {"tokens", 1, 0, 'n'},
        {"temperature", 1, 0, 'T'}, {"top-k", 1, 0, 'k'},    {"seed", 1, 0, 's'},
        {"tokenizer", 1, 0, 'z'},  {"encoder", 1, 0, 'e'},   {"vocab", 1, 0, 'v'},
        {"heads", 1, 0, 'H'},      {"threads", 1, 0, 't'},   {"help", 0, 0, 'h'},
        {0, 0, 0, 0}};
    memset(o, 0, sizeof *o);
    o->tokens = 100;
    o->top_k = 40;
    o->seed = 1;
    o->temperature = 1.0f;
    optind = 1;
    opterr = 0;
    int c, ok = 1;
    while (ok && (c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'c': o->ckpt = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'n': ok = cli_parse_long(CMD, "--tokens", optarg, 0, 1 << 20, &o->tokens); break;
        case 'T': ok = cli_parse_float(CMD, "--temperature", optarg, 0, 100, &o->temperature); break;
        case 'k': ok = cli_parse_long(CMD, "--top-k", optarg, 0, 1 << 20, &o->top_k); break;
        case 's': ok = cli_parse_long(CMD, "--seed", optarg, 0, 1L << 40, &o->seed); break;
        case 'z': o->tokenizer = optarg; break;
        case 'e': o->encoder = optarg; break;
        case 'v': o->vocab = optarg; break;
        case 'H': ok = cli_parse_long(CMD, "--heads", optarg, 1, 4096, &o->heads); break;
        case 't': ok = cli_parse_long(CMD, "--threads", optarg, 1, 4096, &o->threads); break;
        case 'h': help(); return -1;
        default:
            return cli_bad_option(CMD, argv);
        }
    }
    if (!ok)
        return CLI_USAGE;
    if (cli_no_operands(CMD, argc, argv))
        return CLI_USAGE;
    if (!o->ckpt)
        return cli_usage_error(CMD, "missing --checkpoint FILE");
    if (!o->prompt)
        return cli_usage_error(CMD, "missing --prompt TEXT");
    return 0;
}

static coh_status make_tokenizer(const gen_opts *o, const char *recorded, coh_tokenizer **out)
{
    const char *name = o->tokenizer ? o->tokenizer : (*recorded ? recorded : "gpt2");
    if (!strcmp(name, "byte"))
        return coh_tokenizer_byte_create(out);
    if (strcmp(name, "gpt2"))
        return coh_errf(COH_ERR_INVALID, "invalid tokenizer '%s': must be byte or gpt2", name);
    if (!o->encoder || !o->vocab)
        return coh_errf(COH_ERR_INVALID, "the gpt2 tokenizer needs --encoder FILE and --vocab "
                        "FILE (encoder.json and vocab.bpe)");
    return coh_tokenizer_gpt2_create(o->encoder, o->vocab, out);
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

static coh_status generate(const gen_opts *o)
{
    coh_gpt_config m;
    char recorded[32];
    coh_status st = coh_gpt_checkpoint_config(o->ckpt, (int)o->heads, &m, recorded,
                                              sizeof recorded);
    coh_tokenizer *tk = NULL;
    coh_gpt *g = NULL;
    coh_tokens ids;
    coh_tokens_init(&ids);
    float *logits = malloc(sizeof(float) * 2 * (size_t)m.vocab);
    if (!st && !logits)
        st = coh_errf(COH_ERR_NOMEM, "out of memory for logits");
    if (!st && !(st = make_tokenizer(o, recorded, &tk)) &&
        coh_tokenizer_vocab_size(tk) > (size_t)m.vocab)
        st = coh_errf(COH_ERR_MISMATCH, "tokenizer '%s' has %zu ids but the model only %d",
                      coh_tokenizer_name(tk), coh_tokenizer_vocab_size(tk), m.vocab);
    if (!st && !(st = coh_gpt_create(&m, 1, m.seq, &g)) && !(st = coh_gpt_load(g, o->ckpt)))
        st = coh_tokenizer_encode(tk, o->prompt, strlen(o->prompt), &ids);
    if (!st && ids.count == 0 && coh_tokenizer_eot(tk) >= 0)
        st = coh_tokens_push(&ids, coh_tokenizer_eot(tk));
    if (!st && ids.count == 0)
        st = coh_errf(COH_ERR_INVALID, "empty prompt: the byte tokenizer needs some text");
    if (!st)
        fputs(o->prompt, stdout);
    uint64_t rng = (uint64_t)o->seed;
    for (long k = 0; !st && k < o->tokens; k++) {
        size_t ctx = ids.count < (size_t)m.seq ? ids.count : (size_t)m.seq;
        if ((st = coh_gpt_next_logits(g, ids.ids + ids.count - ctx, (int)ctx, logits)))
            break;
        int32_t next = sample(logits, logits + m.vocab, m.vocab, o, &rng);
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
    coh_tokenizer_destroy(tk);
    return st;
}

int cmd_generate(int argc, char **argv)
{
    gen_opts o;
    int rc = parse(&o, argc, argv);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    cli_engine_setup(o.threads ? (int)o.threads : 0);
    coh_status st = generate(&o);
    return st ? cli_fail(CMD, st) : CLI_OK;
}
