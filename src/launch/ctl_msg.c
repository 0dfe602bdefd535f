/* ctl_msg.c: parsers of the control channel's lines (what another launcher, or a stranger who
 * reached the control port, sends). Each is strict: a line must match its form whole. */
#include <stdio.h>
#include <string.h>

#include "launch/agent.h"

static int is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return 0;
    return s[n] == '\0';
}

int ctl_parse_chal(const char *line, char nonce[CTL_NONCE_HEX + 1])
{
    if (strncmp(line, "CHAL ", 5) || strlen(line + 5) != CTL_NONCE_HEX || !is_hex(line + 5, CTL_NONCE_HEX))
        return 0;
    memcpy(nonce, line + 5, CTL_NONCE_HEX + 1);
    return 1;
}

int ctl_parse_welcome(const char *line, char mac[CTL_MAC_HEX + 1])
{
    if (strncmp(line, "WELCOME ", 8) || strlen(line + 8) != CTL_MAC_HEX || !is_hex(line + 8, CTL_MAC_HEX))
        return 0;
    memcpy(mac, line + 8, CTL_MAC_HEX + 1);
    return 1;
}

int ctl_parse_hello(const char *line, ctl_hello *h)
{
    int nonce_at = 0, nonce_end = 0, mac_at = 0, end = 0;
    memset(h, 0, sizeof *h);
    /* fields are separated by single spaces: sscanf's spaces would also take a tab or a newline,
     * and the MAC covers the bytes before the last space */
    if (strpbrk(line, "\t\n\v\f\r"))
        return 0;
    /* the %n positions make each field a whole word: %32s alone would cut a longer one */
    if (sscanf(line, "HELLO %d %d %d %127s %n%32s%n %n%64s%n", &h->node_rank, &h->nnodes,
               &h->nproc, h->host, &nonce_at, h->nonce, &nonce_end, &mac_at, h->mac, &end) != 6 ||
        line[end] != '\0' || line[nonce_at - 1] != ' ' || nonce_end - nonce_at != CTL_NONCE_HEX ||
        mac_at != nonce_end + 1 ||
        end - mac_at != CTL_MAC_HEX)
        return 0;
    if (h->nproc < 1 || h->nproc > 4096 || h->nnodes < 1 || h->nnodes > 4096 || h->node_rank < 0 ||
        strlen(h->nonce) != CTL_NONCE_HEX || !is_hex(h->nonce, CTL_NONCE_HEX) ||
        strlen(h->mac) != CTL_MAC_HEX || !is_hex(h->mac, CTL_MAC_HEX))
        return 0;
    h->body_len = strlen(line) - CTL_MAC_HEX - 1; /* what the MAC covers */
    return 1;
}

int ctl_split_mac(char *line, const char **mac)
{
    char *sp = strrchr(line, ' ');
    if (!sp || strlen(sp + 1) != CTL_MAC_HEX || !is_hex(sp + 1, CTL_MAC_HEX))
        return 0;
    *sp = '\0';
    *mac = sp + 1;
    return 1;
}

int ctl_parse_start(const char *line, int *attempt, int *world, int *base, char *id, size_t n,
                    int *node_rank, int *nnodes)
{
    char buf[128];
    int end = 0;
    if (sscanf(line, "START %d %d %d %127s %d %d%n", attempt, world, base, buf, node_rank, nnodes,
               &end) != 6 || line[end] != '\0' || *attempt < 0 || *world < 1 || *base < 0 ||
        *base >= *world || *nnodes < 2 || *nnodes > 4096 || *node_rank < 1 || *node_rank >= *nnodes)
        return 0;
    snprintf(id, n, "%s", buf);
    return 1;
}

int ctl_parse_exit(const char *line, int *code, int *root, const char **desc)
{
    int end = 0;
    if (sscanf(line, "EXIT %d %d%n", code, root, &end) != 2 || *code < 0 || *code > 255)
        return 0;
    *desc = line[end] == ' ' ? line + end + 1 : line + end;
    return 1;
}

int ctl_parse_text(const char *line, const char *kind, char *out, size_t n)
{
    size_t k = strlen(kind);
    if (n == 0 || strncmp(line, kind, k) || line[k] != ' ')
        return 0;
    snprintf(out, n, "%s", line + k + 1); /* cut to what the receiver keeps */
    return 1;
}

int ctl_parse_fail(const char *line, failure *f)
{
    int n = 0;
    memset(f, 0, sizeof *f);
    if (sscanf(line, "FAIL %d %d %d %d %d %ld %d %d %lf %255s %n", &f->exit_code, &f->restartable,
               &f->rank, &f->local_rank, &f->node_rank, &f->pid, &f->code, &f->sig, &f->when,
               f->host, &n) < 10 || n == 0)
        return 0;
    if (f->exit_code < 0 || f->exit_code > 255)
        return 0;
    snprintf(f->what, sizeof f->what, "%s", line + n);
    return 1;
}
