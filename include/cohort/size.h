/* size.h: byte sizes as users type them ("16GiB", "10GB", "512M") and as cohort prints them. */
#ifndef COHORT_SIZE_H
#define COHORT_SIZE_H

#include <stddef.h>
#include <stdint.h>

#include "cohort/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Parse a byte size: a non-negative decimal number (fraction allowed) and an optional unit,
 * case-insensitive, optionally separated by one space:
 *   B; KiB MiB GiB TiB PiB EiB (powers of 1024); KB MB GB TB PB EB (powers of 1000, SI);
 *   K M G T P E alone mean the binary units, as nvidia-smi, Slurm and most tools read them.
 * The result is rounded down to whole bytes and must fit in 64 bits.
 * Errors: COH_ERR_INVALID naming the text and the accepted forms. */
coh_status coh_size_parse(const char *text, uint64_t *out_bytes);

/* Write bytes in the largest binary unit that keeps the value >= 1, with two decimals
 * ("1.50 GiB", "512.00 MiB", "17 B"). Returns buf. cap >= 16 is always enough. */
char *coh_size_format(uint64_t bytes, char *buf, size_t cap);

/* The same in decimal (SI) units, as papers print them: "120.00 GB" is 1.2e11 bytes. */
char *coh_size_format_si(uint64_t bytes, char *buf, size_t cap);

#ifdef __cplusplus
}
#endif
#endif
