/* unicode.h: the character classes of GPT-2's pre-split regex (\p{L}, \p{N}, \s) and a strict
 * UTF-8 decoder. Internal. */
#ifndef COHORT_DATA_UNICODE_H
#define COHORT_DATA_UNICODE_H

#include <stddef.h>
#include <stdint.h>

typedef struct coh_cp_range {
    uint32_t lo, hi; /* inclusive */
} coh_cp_range;

/* Generated tables (unicode_classes.c), sorted, non-overlapping. */
extern const coh_cp_range coh_unicode_letters[];
extern const size_t coh_unicode_letters_count;
extern const coh_cp_range coh_unicode_numbers[];
extern const size_t coh_unicode_numbers_count;

/* Classes of the pre-split: letter, number, white space, anything else. */
enum { UCLASS_OTHER = 0, UCLASS_LETTER, UCLASS_NUMBER, UCLASS_SPACE };

/* Class of a code point; an invalid byte (passed as UCLASS_INVALID_CP) is OTHER. */
int unicode_class(uint32_t cp);

/* Decode one code point of s[0..n) (n >= 1) into *cp and return its length in bytes. Overlong
 * forms, surrogates, values above U+10FFFF and truncated sequences are invalid: then the length
 * is 1 and *cp is UCLASS_INVALID_CP. */
#define UCLASS_INVALID_CP 0xFFFFFFFFu
size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp);

/* Whether cp lies in one of the sorted ranges (binary search). */
int unicode_in_ranges(const coh_cp_range *r, size_t count, uint32_t cp);

#endif
