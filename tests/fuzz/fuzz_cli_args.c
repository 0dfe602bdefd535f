/* fuzz_cli_args.c: libFuzzer target for the CLI's parsers of option values (cli/cli_args.c:
 * integers, numbers, sizes, device memory, and plan's links GB/S[:LATENCY_US]), compiled in
 * here with its own cli_usage_error, which records the message. The first byte picks the parser; the
 * rest is the value. Accepted values are in range and free of blanks; a refusal is one usage
 * message naming the option and the value as typed. */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../cli/cli_args.c"

static char message[2048];
static int messages;

int cli_usage_error(const char *cmd, const char *fmt, ...)
{
    (void)cmd;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof message, fmt, ap);
    va_end(ap);
    messages++;
    return CLI_USAGE;
}

/* A refusal prints one message naming the option and the value; an acceptance prints none. */
static void verdict(int ok, const char *opt, const char *text)
{
    if (ok ? messages != 0 : messages != 1 || !strstr(message, opt) || !strstr(message, text))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char text[128];
    if (size < 1 || size > sizeof text || memchr(data + 1, 0, size - 1))
        return 0;
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    int blank = text[0] == ' ' || (text[0] >= '\t' && text[0] <= '\r');
    messages = 0;
    switch (data[0] % 5) {
    case 0: {
        long v;
        int ok = cli_parse_long("fuzz", "--steps", text, -1000, 1L << 40, &v);
        verdict(ok, "--steps", text);
        if (ok && (v < -1000 || v > 1L << 40 || blank))
            abort();
        break;
    }
    case 1: {
        double v;
        int ok = cli_parse_double("fuzz", "--lr", text, 0, 10, &v);
        verdict(ok, "--lr", text);
        if (ok && (!(v >= 0 && v <= 10) || blank))
            abort();
        break;
    }
    case 2: {
        uint64_t v;
        int ok = cli_parse_size("fuzz", "--max-bytes", text, 1, &v);
        verdict(ok, "--max-bytes", text);
        if (ok && v < 1)
            abort();
        break;
    }
    case 3: {
        uint64_t v;
        int ok = cli_parse_memory("fuzz", "--device-memory", text, &v);
        verdict(ok, "--device-memory", text);
        if (ok && (v < 1 || strspn(text, "0123456789.") == strlen(text)))
            abort(); /* a bare number is never taken for bytes */
        break;
    }
    default: {
        coh_link l;
        int ok = cli_parse_link("fuzz", "--link-intra", text, &l);
        verdict(ok, "--link-intra", text);
        if (ok && (!(l.bytes_per_s > 0 && l.bytes_per_s <= 1e15) ||
                   !(l.alpha_s >= 0 && l.alpha_s <= 10) || strpbrk(text, " \t\n\v\f\r")))
            abort();
        break;
    }
    }
    return 0;
}
