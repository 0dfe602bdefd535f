/* bpe_mini_tables.h: a small GPT-2-style BPE table (all 256 bytes and a few merges) for the
 * tokenizer fuzz targets when GPT-2's own tables are not available. */
#ifndef COHORT_FUZZ_BPE_MINI_TABLES_H
#define COHORT_FUZZ_BPE_MINI_TABLES_H

#include <stdio.h>
#include <string.h>

/* GPT-2's byte alphabet: printable Latin-1 bytes stand for themselves, the rest are shifted. */
static unsigned mini_alphabet(int b)
{
    unsigned n = 0;
    for (int c = 0; c < b; c++)
        n += !((c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || c >= 0xAE);
    return ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE) ? (unsigned)b
                                                                              : 256 + n;
}

/* Writes encoder.json into enc (>= 8192 bytes) and returns the merges text. */
static const char *mini_tables(char *enc)
{
    size_t o = 0;
    enc[o++] = '{';
    for (int b = 0; b < 256; b++) {
        unsigned cp = mini_alphabet(b);
        o += (size_t)sprintf(enc + o, "%s\"", b ? "," : "");
        if (cp == '"' || cp == '\\')
            enc[o++] = '\\';
        if (cp < 0x80)
            enc[o++] = (char)cp;
        else {
            enc[o++] = (char)(0xC0 | cp >> 6);
            enc[o++] = (char)(0x80 | (cp & 0x3F));
        }
        o += (size_t)sprintf(enc + o, "\":%d", b);
    }
    strcpy(enc + o, ",\"aa\":256,\"bc\":257,\"ab\":258,\"\xc4\xa0" "a\":259,\"\xc4\xa0" "aa\":260,"
                    "\"th\":261,\"\xc4\xa0th\":262,\"\xc4\xa0the\":263,\"<|endoftext|>\":264}");
    return "#version: 0.2\na a\nb c\na b\n\xc4\xa0 a\n\xc4\xa0" "a a\nt h\n\xc4\xa0 th\n"
           "\xc4\xa0th e\n";
}

#endif
