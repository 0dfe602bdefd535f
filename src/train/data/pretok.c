/* pretok.c: GPT-2's regex pre-split, evaluated by hand: one alternative after another at each
 * position, exactly as a backtracking regex engine would try them. */
#include "train/data/bpe.h"
#include "train/data/unicode.h"

/* Class and byte length of the character at s[i]. */
static int class_at(const unsigned char *s, size_t n, size_t i, size_t *len)
{
    uint32_t cp;
    *len = utf8_decode(s + i, n - i, &cp);
    return unicode_class(cp);
}

/* Bytes of the run of characters of class cls starting at s[i]. */
static size_t run_of(const unsigned char *s, size_t n, size_t i, int cls)
{
    size_t j = i, len;
    while (j < n && class_at(s, n, j, &len) == cls)
        j += len;
    return j - i;
}

/* 's 't 're 've 'm 'll 'd after an apostrophe at s[i]: the length without the apostrophe. */
static size_t contraction(const unsigned char *s, size_t n, size_t i)
{
    if (i + 1 >= n)
        return 0;
    unsigned char a = s[i + 1], b = i + 2 < n ? s[i + 2] : 0;
    if (a == 's' || a == 't' || a == 'm' || a == 'd')
        return 1;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
        return 2;
    return 0;
}

/* \s+(?!\S) then \s+ from s[i], a white space character. */
static size_t space_run(const unsigned char *s, size_t n, size_t i)
{
    size_t j = i, last = i, len;
    while (j < n && class_at(s, n, j, &len) == UCLASS_SPACE) {
        last = j;
        j += len;
    }
    /* Followed by a non-space: give the last white space to the next pre-token (" word"). */
    if (j < n && last > i)
        return last - i;
    return j - i;
}

size_t pretok_next(const unsigned char *s, size_t n, size_t i)
{
    if (s[i] == '\'') {
        size_t c = contraction(s, n, i);
        if (c)
            return 1 + c;
    }
    size_t len;
    int cls = class_at(s, n, i, &len);
    if (s[i] == ' ' && i + 1 < n) {
        size_t len2;
        int next = class_at(s, n, i + 1, &len2);
        if (next != UCLASS_SPACE)
            return 1 + run_of(s, n, i + 1, next);
    }
    if (cls != UCLASS_SPACE)
        return run_of(s, n, i, cls);
    return space_run(s, n, i);
}
