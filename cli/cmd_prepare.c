/* cmd_prepare.c: `cohort prepare`: tokenizes text files into llm.c token shards (.bin), split
 * into train and validation shards, documents separated by the end-of-text token. */
#define _GNU_SOURCE /* memmem */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "cli_gpt2.h"
#include "cohort/data.h"

const char cmd_prepare_summary[] = "tokenize text files into token shards for training";

static const char *const CMD = "prepare";

static void help(void)
{
    printf("usage: cohort prepare --out PREFIX [options] FILE...\n\n"
           "Tokenizes the text FILEs into token shards in llm.c's .bin format (a 256-int32\n"
           "header: magic 20240520, version 1, token count; then uint16 tokens), written as\n"
           "PREFIX_train_000000.bin, ... and PREFIX_val_000000.bin, ...; after a successful\n"
           "run, the files of that pattern it did not write (an earlier run's) are removed.\n"
           "Every document starts with the end-of-text token (gpt2: 50256; the byte tokenizer\n"
           "has none and joins documents as they are).\n\n"
           "options:\n"
           "  --out PREFIX           path prefix of the shards, in an existing folder (required)\n"
           "  --tokenizer byte|gpt2  tokenizer (default gpt2)\n");
    cli_gpt2_help();
    printf("  --documents file|paragraph\n"
           "                         a document is a whole file (default), or each part of it\n"
           "                         between blank lines (lines of only whitespace, as\n"
           "                         WikiText's \" \\n\"; kept with the part)\n"
           "  --shard-tokens N       tokens per shard (default 100000000)\n"
           "  --val-fraction F       share of documents' tokens for validation, 0..1 (default 0)\n"
           "  -h, --help             this help\n");
}

typedef struct split {
    const char *name; /* "train" or "val" */
    coh_tokens buf;
    int shards;
    uint64_t tokens;
} split;

typedef struct prep {
    const char *out;
    char dir[4096];   /* the folder the shards go to: out up to its last '/', else "." */
    const char *base; /* out after its last '/' */
    uint64_t shard_tokens;
    double val_fraction;
    int paragraphs;
    coh_tokenizer *tok;
    split train, val;
    uint64_t documents;
    uint64_t bytes; /* of text read, to tell empty input from a too large validation share */
} prep;

/* Digits of a shard's number in its name (PREFIX_train_000000.bin). */
enum { SHARD_DIGITS = 6 };

static coh_status flush_shard(prep *p, split *s)
{
    char path[4096];
    if (s->buf.count == 0)
        return COH_OK;
    if (snprintf(path, sizeof path, "%s_%s_%0*d.bin", p->out, s->name, SHARD_DIGITS,
                 s->shards) >= (int)sizeof path)
        return coh_errf(COH_ERR_INVALID, "output prefix '%s' is too long", p->out);
    coh_status st = coh_shard_write(path, s->buf.ids, s->buf.count);
    if (st != COH_OK)
        return st;
    s->shards++;
    s->buf.count = 0;
    return COH_OK;
}

/* Append a document's tokens to a split, writing full shards as they fill. */
static coh_status add_tokens(prep *p, split *s, const coh_tokens *doc)
{
    for (size_t i = 0; i < doc->count; i++) {
        coh_status st = coh_tokens_push(&s->buf, doc->ids[i]);
        if (st == COH_OK && s->buf.count == p->shard_tokens)
            st = flush_shard(p, s);
        if (st != COH_OK)
            return st;
    }
    s->tokens += doc->count;
    return COH_OK;
}

/* A document goes to validation while validation holds less than its share of all tokens, so
 * the split streams and validation documents are spread evenly (the first one included). */
static coh_status add_document(prep *p, const char *text, size_t len, coh_tokens *doc)
{
    doc->count = 0;
    p->bytes += len;
    int32_t eot = coh_tokenizer_eot(p->tok);
    coh_status st = eot >= 0 ? coh_tokens_push(doc, eot) : COH_OK;
    if (st == COH_OK)
        st = coh_tokenizer_encode(p->tok, text, len, doc);
    if (st != COH_OK)
        return st;
    p->documents++;
    double total = (double)(p->train.tokens + p->val.tokens + doc->count);
    int to_val = p->val_fraction > 0 && (double)p->val.tokens < p->val_fraction * total;
    return add_tokens(p, to_val ? &p->val : &p->train, doc);
}

static coh_status read_file(const char *path, char **text, size_t *len)
{
    struct stat sb;
    if (stat(path, &sb) == 0 && S_ISDIR(sb.st_mode))
        return coh_errf(COH_ERR_INVALID, "cannot read '%s': it is a directory; give the text "
                        "files in it (e.g. '%s'/*.txt)", path, path);
    FILE *f = fopen(path, "rb");
    if (!f)
        return coh_errf(errno == ENOENT ? COH_ERR_NOT_FOUND : COH_ERR_IO,
                        "cannot open '%s': %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        n += fread(buf + n, 1, cap - n, f);
        if (n < cap)
            break;
        char *more = realloc(buf, cap * 2);
        if (!more) {
            free(buf);
            buf = NULL;
            break;
        }
        buf = more;
        cap *= 2;
    }
    int bad = ferror(f), err = errno;
    fclose(f);
    if (!buf)
        return coh_errf(COH_ERR_NOMEM, "out of memory reading '%s'", path);
    if (bad) {
        free(buf);
        return coh_errf(COH_ERR_IO, "cannot read '%s': %s", path, strerror(err));
    }
    *text = buf;
    *len = n;
    return COH_OK;
}

/* End of the line starting at i (after its '\n', or len), and whether it holds only
 * whitespace: WikiText's blank lines are " \n", Windows files end lines in "\r\n". */
static size_t line_end(const char *text, size_t len, size_t i, int *blank)
{
    *blank = 1;
    for (; i < len && text[i] != '\n'; i++)
        if (!strchr(" \t\r\f\v", text[i]))
            *blank = 0;
    return i < len ? i + 1 : len;
}

/* The paragraph starting at `start` ends after the blank lines that follow its text (kept
 * with it, as llm.c's tinyshakespeare split keeps "\n\n"); blank lines at the start of the
 * file go with the first paragraph, so no document is only whitespace. */
static size_t paragraph_end(const char *text, size_t len, size_t start)
{
    size_t i = start;
    int blank = 1, seen_text = 0;
    while (i < len) {
        size_t next = line_end(text, len, i, &blank);
        if (!blank)
            seen_text = 1;
        else if (seen_text) { /* the first blank line after text: take the whole run */
            while (blank && i < len) {
                i = next;
                if (i < len)
                    next = line_end(text, len, i, &blank);
            }
            return i;
        }
        i = next;
    }
    return len;
}

static coh_status prepare_file(prep *p, const char *path, coh_tokens *doc)
{
    char *text = NULL;
    size_t len = 0;
    coh_status st = read_file(path, &text, &len);
    if (st != COH_OK)
        return st;
    if (!p->paragraphs) {
        st = add_document(p, text, len, doc);
        free(text);
        return st;
    }
    size_t start = 0;
    while (st == COH_OK && start < len) {
        size_t end = paragraph_end(text, len, start);
        st = add_document(p, text + start, end - start, doc);
        start = end;
    }
    free(text);
    return st;
}

/* Whether `name` is PREFIX_<split>_NNNNNN.bin (the prefix's base name, SHARD_DIGITS digits) with
 * a number this run did not write: a shard of an earlier run with more shards. */
static int stale_shard(const char *name, const char *base, const split *s)
{
    size_t bl = strlen(base), sl = strlen(s->name);
    if (strncmp(name, base, bl) || name[bl] != '_' || strncmp(name + bl + 1, s->name, sl) ||
        name[bl + 1 + sl] != '_')
        return 0;
    const char *digits = name + bl + sl + 2;
    for (int i = 0; i < SHARD_DIGITS; i++)
        if (!isdigit((unsigned char)digits[i]))
            return 0;
    return !strcmp(digits + SHARD_DIGITS, ".bin") && strtol(digits, NULL, 10) >= s->shards;
}

/* After a successful run, remove the shards of this prefix it did not write: a glob such as
 * PREFIX_train_*.bin would train on them, and an old validation shard would hold text that is
 * now in the train split. Files named otherwise are never touched. */
static coh_status remove_stale_shards(const prep *p, int *removed)
{
    *removed = 0;
    DIR *d = opendir(p->dir);
    if (!d)
        return coh_errf(COH_ERR_IO, "cannot list folder '%s' for old shards: %s", p->dir,
                        strerror(errno));
    coh_status st = COH_OK;
    for (struct dirent *e; st == COH_OK && (e = readdir(d));) {
        struct stat sb;
        if ((!stale_shard(e->d_name, p->base, &p->train) &&
             !stale_shard(e->d_name, p->base, &p->val)) ||
            fstatat(dirfd(d), e->d_name, &sb, AT_SYMLINK_NOFOLLOW) || S_ISDIR(sb.st_mode))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0))
            st = coh_errf(COH_ERR_IO, "cannot remove the old shard '%s/%s': %s", p->dir,
                          e->d_name, strerror(errno));
        else
            (*removed)++;
    }
    closedir(d);
    return st;
}

/* The folder of --out must exist and be writable: refused before tokenizing, naming it,
 * rather than failing at the first shard on a temporary file's name. */
static int check_out_folder(prep *p)
{
    const char *slash = strrchr(p->out, '/');
    p->base = slash ? slash + 1 : p->out;
    if (strlen(p->out) >= sizeof p->dir)
        return cli_usage_error(CMD, "invalid --out '%s': the path is too long", p->out);
    cli_folder_of(p->out, p->dir, sizeof p->dir);
    return cli_check_folder_of(CMD, "--out", p->out);
}

static int parse_options(int argc, char **argv, prep *p, const char **tokenizer,
                         const char **encoder, const char **merges)
{
    static const struct option opts[] = {
        {"out", required_argument, 0, 'o'},       {"tokenizer", required_argument, 0, 't'},
        CLI_GPT2_OPTIONS('e', 'm', 'v'),
        {"documents", required_argument, 0, 'd'}, {"shard-tokens", required_argument, 0, 's'},
        {"val-fraction", required_argument, 0, 'f'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
        long n;
        switch (c) {
        case 'o': p->out = optarg; break;
        case 't': *tokenizer = optarg; break;
        case 'e': *encoder = optarg; break;
        case 'm': *merges = optarg; break;
        case 'v':
            if (!cli_gpt2_old_vocab(CMD, optarg, merges))
                return CLI_USAGE;
            break;
        case 'd':
            if (strcmp(optarg, "file") && strcmp(optarg, "paragraph"))
                return cli_usage_error(CMD, "invalid --documents '%s': valid are file, paragraph",
                                       optarg);
            p->paragraphs = !strcmp(optarg, "paragraph");
            break;
        case 's':
            if (!cli_parse_long(CMD, "--shard-tokens", optarg, 1, 2147483647, &n))
                return CLI_USAGE;
            p->shard_tokens = (uint64_t)n;
            break;
        case 'f':
            if (!cli_parse_double(CMD, "--val-fraction", optarg, 0, 1, &p->val_fraction))
                return CLI_USAGE;
            if (p->val_fraction == 1)
                return cli_usage_error(CMD, "invalid --val-fraction '%s': must be below 1 (no "
                                       "tokens would be left for training)", optarg);
            break;
        case 'h': help(); return -1;
        case ':':
            return cli_usage_error(CMD, "option '%s' needs a value (see 'cohort prepare --help')",
                                   argv[optind - 1]);
        default:
            return cli_usage_error(CMD, "unknown option '%s' (see 'cohort prepare --help')",
                                   argv[optind - 1]);
        }
    }
    if (!p->out)
        return cli_usage_error(CMD, "missing --out PREFIX (see 'cohort prepare --help')");
    size_t ol = strlen(p->out);
    if (ol == 0 || p->out[ol - 1] == '/')
        return cli_usage_error(CMD, "invalid --out '%s': give a path prefix such as '%sdata', "
                               "and the shards are written as PREFIX_train_000000.bin, ...",
                               p->out, p->out);
    if (optind >= argc)
        return cli_usage_error(CMD, "no input files (see 'cohort prepare --help')");
    return check_out_folder(p);
}

static int make_tokenizer(prep *p, const char *kind, const char *encoder, const char *merges)
{
    coh_status st = COH_OK;
    if (!strcmp(kind, "byte")) {
        int rc = cli_gpt2_no_tables(CMD, kind, encoder, merges);
        if (rc)
            return rc;
        st = coh_tokenizer_byte_create(&p->tok);
    }
    else if (!strcmp(kind, "gpt2")) {
        int rc = cli_gpt2_open(CMD, encoder, merges, &p->tok);
        if (rc)
            return rc;
    } else
        return cli_usage_error(CMD, "invalid --tokenizer '%s': valid are byte, gpt2", kind);
    if (st != COH_OK)
        return cli_fail(CMD, st);
    if (coh_tokenizer_vocab_size(p->tok) > 65536)
        return cli_usage_error(CMD, "the tokenizer has %zu ids: the shard format stores uint16 "
                               "tokens (at most 65536 ids)", coh_tokenizer_vocab_size(p->tok));
    return 0;
}

int cmd_prepare(int argc, char **argv)
{
    prep p = {.shard_tokens = 100000000, .train = {.name = "train"}, .val = {.name = "val"}};
    const char *kind = "gpt2", *encoder = NULL, *merges = NULL;
    int rc = parse_options(argc, argv, &p, &kind, &encoder, &merges);
    if (rc)
        return rc < 0 ? CLI_OK : rc;
    if ((rc = make_tokenizer(&p, kind, encoder, merges)) != 0) {
        coh_tokenizer_destroy(p.tok);
        return rc;
    }
    coh_tokens doc;
    coh_tokens_init(&doc);
    coh_status st = COH_OK;
    for (int i = optind; st == COH_OK && i < argc; i++)
        st = prepare_file(&p, argv[i], &doc);
    /* Refuse before writing the last shards: a failed run then leaves no shard behind unless
     * validation alone overflowed a whole shard. */
    if (st == COH_OK && p.bytes == 0)
        st = coh_errf(COH_ERR_INVALID, "the input files are empty: no text to tokenize; give "
                      "files with text");
    if (st == COH_OK && p.train.tokens == 0)
        st = coh_errf(COH_ERR_INVALID, "no tokens went to the train split (%llu document(s); "
                      "validation takes whole documents: lower --val-fraction, add text%s)",
                      (unsigned long long)p.documents, p.paragraphs ? "" :
                      ", or split files into documents with --documents paragraph");
    if (st == COH_OK)
        st = flush_shard(&p, &p.train);
    if (st == COH_OK)
        st = flush_shard(&p, &p.val);
    int removed = 0;
    if (st == COH_OK)
        st = remove_stale_shards(&p, &removed);
    coh_tokens_release(&doc);
    coh_tokens_release(&p.train.buf);
    coh_tokens_release(&p.val.buf);
    coh_tokenizer_destroy(p.tok);
    if (st != COH_OK)
        return cli_fail(CMD, st);
    printf("prepared %llu documents: %llu train tokens in %d shard(s), %llu val tokens in %d "
           "shard(s), prefix '%s'\n", (unsigned long long)p.documents,
           (unsigned long long)p.train.tokens, p.train.shards, (unsigned long long)p.val.tokens,
           p.val.shards, p.out);
    if (removed)
        printf("removed %d old shard(s) that this run did not write: %s_{train,val}_NNNNNN.bin\n",
               removed, p.out);
    return CLI_OK;
}
