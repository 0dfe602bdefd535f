/* unicode.c: character class lookup and strict UTF-8 decoding for the GPT-2 pre-split. */
#include "train/data/unicode.h"

int unicode_in_ranges(const coh_cp_range *r, size_t count, uint32_t cp)
{
    size_t lo = 0, hi = count;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

/* \s as ECMAScript defines it (WhiteSpace and LineTerminator), which is what the reference
 * implementation under Node.js uses. Python's `regex` differs only at U+0085 (space there) and
 * U+FEFF (not space there). */
static int is_space(uint32_t cp)
{
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D))
        return 1;
    if (cp < 0xA0)
        return 0;
    return cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
           cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

int unicode_class(uint32_t cp)
{
    if (cp == UCLASS_INVALID_CP)
        return UCLASS_OTHER;
    if (cp < 0x80) { /* the common case, without a search */
        if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z')
            return UCLASS_LETTER;
        if (cp >= '0' && cp <= '9')
            return UCLASS_NUMBER;
        return is_space(cp) ? UCLASS_SPACE : UCLASS_OTHER;
    }
    if (is_space(cp))
        return UCLASS_SPACE;
    if (unicode_in_ranges(coh_unicode_letters, coh_unicode_letters_count, cp))
        return UCLASS_LETTER;
    if (unicode_in_ranges(coh_unicode_numbers, coh_unicode_numbers_count, cp))
        return UCLASS_NUMBER;
    return UCLASS_OTHER;
}

size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
    unsigned c = s[0];
    *cp = UCLASS_INVALID_CP;
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t len;
    uint32_t v, min;
    if (c >= 0xC2 && c <= 0xDF)
        len = 2, v = c & 0x1F, min = 0x80;
    else if (c >= 0xE0 && c <= 0xEF)
        len = 3, v = c & 0x0F, min = 0x800;
    else if (c >= 0xF0 && c <= 0xF4)
        len = 4, v = c & 0x07, min = 0x10000;
    else
        return 1;
    if (len > n)
        return 1;
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 1;
        v = (v << 6) | (s[i] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF))
        return 1;
    *cp = v;
    return len;
}
