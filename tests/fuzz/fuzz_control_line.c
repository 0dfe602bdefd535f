/* fuzz_control_line.c: libFuzzer target for the lines of cohort run's control channel (what a
 * stranger at node 0's port, or node 0 itself, may send): CHAL, HELLO, WELCOME, the "PAYLOAD
 * MAC" frame, START, EXIT, FAIL, and the TAIL and REPORT lines of a failure. Accepted lines must
 * give values within their ranges, a text line must fit the receiver's slot, and a frame must
 * verify only under the MAC of its own payload. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "launch/agent.h"

static void check_frame(char *text)
{
    static const unsigned char key[] = "fuzz-key-0123456789";
    const char *mac;
    char want[CTL_MAC_HEX + 1];
    if (!ctl_split_mac(text, &mac))
        return;
    if (strlen(mac) != CTL_MAC_HEX || strchr(text, '\0') + 1 != mac)
        abort();
    auth_mac_hex(key, sizeof key - 1, "m", "0", text, want);
    if (auth_mac_equal(mac, want) != !strcmp(mac, want))
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 8192)
        return 0;
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    char nonce[CTL_NONCE_HEX + 1], mac[CTL_MAC_HEX + 1], id[128];
    if (ctl_parse_chal(text, nonce) && strlen(nonce) != CTL_NONCE_HEX)
        abort();
    if (ctl_parse_welcome(text, mac) && strlen(mac) != CTL_MAC_HEX)
        abort();
    ctl_hello h;
    if (ctl_parse_hello(text, &h) &&
        (h.nproc < 1 || h.nproc > 4096 || h.nnodes < 1 || h.node_rank < 0 ||
         h.body_len + 1 + CTL_MAC_HEX != strlen(text) || text[h.body_len] != ' ' ||
         strlen(h.nonce) != CTL_NONCE_HEX || !memchr(h.host, '\0', sizeof h.host)))
        abort();
    int att, world, base, code, root, nr, nn;
    const char *desc;
    if (ctl_parse_start(text, &att, &world, &base, id, sizeof id, &nr, &nn) &&
        (att < 0 || world < 1 || base < 0 || base >= world || !memchr(id, '\0', sizeof id) ||
         nr < 1 || nr >= nn))
        abort();
    if (ctl_parse_exit(text, &code, &root, &desc) &&
        (code < 0 || code > 255 || desc < text || desc > text + size))
        abort();
    failure f;
    if (ctl_parse_fail(text, &f) && (f.exit_code < 0 || f.exit_code > 255 ||
                                     !memchr(f.host, '\0', sizeof f.host) ||
                                     !memchr(f.what, '\0', sizeof f.what)))
        abort();
    static const char *const kinds[] = {"TAIL", "REPORT"};
    for (int k = 0; k < 2; k++) {
        char slot[LAUNCH_TAIL_WIDTH + 1];
        memset(slot, 'x', sizeof slot);
        size_t skip = strlen(kinds[k]) + 1;
        if (ctl_parse_text(text, kinds[k], slot, LAUNCH_TAIL_WIDTH) &&
            (slot[LAUNCH_TAIL_WIDTH] != 'x' || !memchr(slot, '\0', LAUNCH_TAIL_WIDTH) ||
             strlen(text) < skip || strncmp(slot, text + skip, LAUNCH_TAIL_WIDTH - 1)))
            abort();
    }
    check_frame(text);
    free(text);
    return 0;
}
