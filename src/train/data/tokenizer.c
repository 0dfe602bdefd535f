/* tokenizer.c: the public tokenizer API over the byte-level and GPT-2 BPE tokenizers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cohort/data.h"
#include "train/data/bpe.h"
#include "train/data/file_map.h"

typedef enum { TOK_BYTE, TOK_GPT2 } tok_kind;

struct coh_tokenizer {
    tok_kind kind;
    bpe *bpe;
    char bytes[256]; /* the byte tokenizer's tokens */
};

void coh_tokens_init(coh_tokens *v)
{
    v->ids = NULL;
    v->count = v->cap = 0;
}

void coh_tokens_release(coh_tokens *v)
{
    if (!v)
        return;
    free(v->ids);
    coh_tokens_init(v);
}

coh_status coh_tokens_push(coh_tokens *v, int32_t id)
{
    if (v->count == v->cap) {
        size_t cap = v->cap ? v->cap * 2 : 1024;
        int32_t *p = realloc(v->ids, cap * sizeof *p);
        if (!p)
            return coh_errf(COH_ERR_NOMEM, "out of memory holding %zu tokens", cap);
        v->ids = p;
        v->cap = cap;
    }
    v->ids[v->count++] = id;
    return COH_OK;
}

coh_status coh_tokenizer_byte_create(coh_tokenizer **out)
{
    coh_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    t->kind = TOK_BYTE;
    for (int i = 0; i < 256; i++)
        t->bytes[i] = (char)i;
    *out = t;
    return COH_OK;
}

coh_status coh_tokenizer_gpt2_create_from_memory(const char *encoder_json, size_t encoder_len,
                                                 const char *vocab_bpe, size_t vocab_len,
                                                 coh_tokenizer **out)
{
    *out = NULL;
    coh_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        return coh_errf(COH_ERR_NOMEM, "out of memory");
    t->kind = TOK_GPT2;
    coh_status st = bpe_load(encoder_json, encoder_len, "encoder.json", vocab_bpe, vocab_len,
                             "vocab.bpe", &t->bpe);
    if (st != COH_OK) {
        free(t);
        return st;
    }
    *out = t;
    return COH_OK;
}

coh_status coh_tokenizer_gpt2_create(const char *encoder_json, const char *vocab_bpe,
                                     coh_tokenizer **out)
{
    *out = NULL;
    file_map enc, merges;
    coh_status st = file_map_open(&enc, encoder_json);
    if (st != COH_OK)
        return st;
    st = file_map_open(&merges, vocab_bpe);
    if (st != COH_OK) {
        file_map_close(&enc);
        return st;
    }
    coh_tokenizer *t = calloc(1, sizeof *t);
    if (!t)
        st = coh_errf(COH_ERR_NOMEM, "out of memory");
    else {
        t->kind = TOK_GPT2;
        st = bpe_load(enc.data, enc.size, encoder_json, merges.data, merges.size, vocab_bpe,
                      &t->bpe);
    }
    file_map_close(&enc);
    file_map_close(&merges);
    if (st != COH_OK) {
        free(t);
        return st;
    }
    *out = t;
    return COH_OK;
}

void coh_tokenizer_destroy(coh_tokenizer *t)
{
    if (!t)
        return;
    bpe_free(t->bpe);
    free(t);
}

const char *coh_tokenizer_name(const coh_tokenizer *t)
{
    return t->kind == TOK_BYTE ? "byte" : "gpt2";
}

size_t coh_tokenizer_vocab_size(const coh_tokenizer *t)
{
    return t->kind == TOK_BYTE ? 256 : t->bpe->vocab;
}

int32_t coh_tokenizer_eot(const coh_tokenizer *t)
{
    return t->kind == TOK_BYTE ? -1 : t->bpe->eot;
}

coh_status coh_tokenizer_encode(coh_tokenizer *t, const char *text, size_t len, coh_tokens *out)
{
    if (t->kind == TOK_GPT2)
        return bpe_encode(t->bpe, (const unsigned char *)text, len, out);
    for (size_t i = 0; i < len; i++) {
        coh_status st = coh_tokens_push(out, (unsigned char)text[i]);
        if (st != COH_OK)
            return st;
    }
    return COH_OK;
}

coh_status coh_tokenizer_token_bytes(const coh_tokenizer *t, int32_t id, const char **bytes,
                                     size_t *len)
{
    size_t vocab = coh_tokenizer_vocab_size(t);
    if (id < 0 || (size_t)id >= vocab)
        return coh_errf(COH_ERR_INVALID, "token id '%ld' is out of range: valid ids are 0..%zu",
                        (long)id, vocab - 1);
    if (t->kind == TOK_BYTE) {
        *bytes = &t->bytes[id];
        *len = 1;
        return COH_OK;
    }
    const bpe *b = t->bpe;
    *bytes = b->tok_bytes + b->tok_off[id];
    *len = (size_t)(b->tok_off[id + 1] - b->tok_off[id]);
    if (*len == 0)
        return coh_errf(COH_ERR_INVALID, "token id '%ld' has no token in the encoder",
                        (long)id);
    return COH_OK;
}

coh_status coh_tokenizer_decode(const coh_tokenizer *t, const int32_t *ids, size_t n,
                                char **text, size_t *len)
{
    *text = NULL;
    *len = 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t l;
        coh_status st = coh_tokenizer_token_bytes(t, ids[i], &p, &l);
        if (st != COH_OK)
            return coh_err_prefix(st, "cannot decode token %zu", i);
        total += l;
    }
    char *buf = malloc(total + 1);
    if (!buf)
        return coh_errf(COH_ERR_NOMEM, "out of memory decoding %zu tokens", n);
    size_t off = 0;
    for (size_t i = 0; i < n; i++) {
        const char *p;
        size_t l;
        coh_tokenizer_token_bytes(t, ids[i], &p, &l);
        memcpy(buf + off, p, l);
        off += l;
    }
    buf[off] = 0;
    *text = buf;
    *len = off;
    return COH_OK;
}
