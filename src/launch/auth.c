/* auth.c: the job secret of a multi-node job (made by `cohort token`; read from a file only its owner can read, or from
 * COHORT_JOB_TOKEN) and the HMAC-SHA256 arithmetic of the control channel's handshake and of
 * every message after it (OpenSSL's libcrypto: nonces, HMAC, constant-time comparison). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "launch/agent.h"

/* Trailing newlines and spaces are not part of the secret: `echo SECRET > file` and
 * COHORT_JOB_TOKEN=SECRET give the same key. */
static size_t trim(const unsigned char *s, size_t n)
{
    while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' '))
        n--;
    return n;
}

static void to_hex(const unsigned char *b, size_t n, char *out)
{
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[b[i] >> 4];
        out[2 * i + 1] = digits[b[i] & 15];
    }
    out[2 * n] = '\0';
}

coh_status coh_launch_new_token(char out[COH_JOB_TOKEN_HEX + 2])
{
    unsigned char b[COH_JOB_TOKEN_HEX / 2];
    if (RAND_bytes(b, (int)sizeof b) != 1)
        return coh_errf(COH_ERR_SYSTEM, "cannot make a job secret (OpenSSL RAND_bytes failed)");
    to_hex(b, sizeof b, out);
    OPENSSL_cleanse(b, sizeof b);
    out[COH_JOB_TOKEN_HEX] = '\n';
    out[COH_JOB_TOKEN_HEX + 1] = '\0';
    return COH_OK;
}

/* Created, never replaced (O_EXCL: a second node that runs this by mistake must not change the
 * secret under the others), never through a link, owner-only from its first byte. */
coh_status coh_launch_write_token(const char *path)
{
    char tok[COH_JOB_TOKEN_HEX + 2];
    coh_status st = coh_launch_new_token(tok);
    if (st)
        return st;
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        OPENSSL_cleanse(tok, sizeof tok);
        return coh_errf(COH_ERR_INVALID, "job token file '%s' exists already: remove it or name a new file (the nodes of a job must share one secret)", path);
    }
    if (fd < 0) {
        OPENSSL_cleanse(tok, sizeof tok);
        return coh_errf(COH_ERR_IO, "cannot create job token file '%s': %s", path, strerror(errno));
    }
    size_t n = strlen(tok);
    int ok = fchmod(fd, 0600) == 0 && write(fd, tok, n) == (ssize_t)n && fsync(fd) == 0;
    int e = errno;
    OPENSSL_cleanse(tok, sizeof tok);
    if (close(fd) != 0 || !ok) {
        unlink(path);
        return coh_errf(COH_ERR_IO, "cannot write job token file '%s': %s", path, strerror(e));
    }
    return COH_OK;
}

static coh_status key_from_file(const char *path, ctl_key *k)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT)
        return coh_errf(COH_ERR_INVALID, "cannot read job token file '%s': no such file (make one with 'cohort token FILE' on one node and copy it to the others)", path);
    if (fd < 0)
        return coh_errf(COH_ERR_INVALID, "cannot read job token file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        return coh_errf(COH_ERR_INVALID, "invalid job token file '%s': not a regular file", path);
    }
    if (st.st_mode & 077) {
        close(fd);
        return coh_errf(COH_ERR_INVALID, "job token file '%s' is readable or writable by others "
                        "(mode %04o): make it private with 'chmod 600 %s'", path,
                        (unsigned)(st.st_mode & 07777), path);
    }
    ssize_t r = read(fd, k->k, sizeof k->k);
    int e = errno;
    close(fd);
    if (r < 0)
        return coh_errf(COH_ERR_INVALID, "cannot read job token file '%s': %s", path, strerror(e));
    k->len = trim(k->k, (size_t)r);
    if ((size_t)r == sizeof k->k)
        return coh_errf(COH_ERR_INVALID, "invalid job token file '%s': longer than %zu bytes", path, sizeof k->k - 1);
    if (k->len < 16)
        return coh_errf(COH_ERR_INVALID, "invalid job token file '%s': %zu bytes, at least 16 are needed (make one with 'cohort token FILE')", path, k->len);
    return COH_OK;
}

coh_status auth_load_key(const char *file, const char *env_value, ctl_key *k)
{
    memset(k, 0, sizeof *k);
    if (file) {
        k->given = 1;
        return key_from_file(file, k);
    }
    if (env_value) {
        size_t n = strlen(env_value);
        k->len = trim((const unsigned char *)env_value, n);
        if (k->len >= sizeof k->k || k->len < 16)
            return coh_errf(COH_ERR_INVALID, "invalid COHORT_JOB_TOKEN: %zu bytes, expected 16 to %zu (make one with 'cohort token -')", k->len, sizeof k->k - 1);
        memcpy(k->k, env_value, k->len);
        k->given = 1;
    }
    return COH_OK; /* no secret: an empty key, which anyone can compute (trusted networks) */
}


coh_status auth_nonce(char hex[CTL_NONCE_HEX + 1])
{
    unsigned char b[CTL_NONCE_HEX / 2];
    if (RAND_bytes(b, (int)sizeof b) != 1)
        return coh_errf(COH_ERR_SYSTEM, "cannot make a random nonce (OpenSSL RAND_bytes failed)");
    to_hex(b, sizeof b, hex);
    return COH_OK;
}

void auth_mac(const unsigned char *key, size_t klen, const char *label, const char *a,
              const char *b, unsigned char out[32])
{
    /* "label|a|b": the label separates the uses of one key (hello, welcome, session, line) */
    size_t n = strlen(label) + strlen(a) + strlen(b) + 3;
    char *msg = malloc(n);
    unsigned int len = 32;
    static const unsigned char none = 0; /* HMAC wants a key pointer even for an empty key */
    if (!msg) {
        memset(out, 0, 32); /* out of memory: a MAC that will not verify */
        return;
    }
    int m = snprintf(msg, n, "%s|%s|%s", label, a, b);
    if (!HMAC(EVP_sha256(), klen ? key : &none, (int)klen, (const unsigned char *)msg, (size_t)m,
              out, &len))
        memset(out, 0, 32);
    free(msg);
}

void auth_mac_hex(const unsigned char *key, size_t klen, const char *label, const char *a,
                  const char *b, char out[CTL_MAC_HEX + 1])
{
    unsigned char m[32];
    auth_mac(key, klen, label, a, b, m);
    to_hex(m, sizeof m, out);
}

int auth_mac_equal(const char *x, const char *y)
{
    return strlen(x) == CTL_MAC_HEX && strlen(y) == CTL_MAC_HEX &&
           CRYPTO_memcmp(x, y, CTL_MAC_HEX) == 0;
}

coh_status auth_comm_key(agent *a)
{
    if (!a->key.given && a->nnodes == 1 && !a->elastic) {
        char n1[CTL_NONCE_HEX + 1], n2[CTL_NONCE_HEX + 1];
        coh_status st = auth_nonce(n1);
        if (!st)
            st = auth_nonce(n2);
        if (!st)
            snprintf(a->comm_key, sizeof a->comm_key, "%s%s", n1, n2);
        return st;
    }
    char att[32];
    snprintf(att, sizeof att, "%d", a->attempt);
    auth_mac_hex(a->key.k, a->key.len, "comm", a->run_id, att, a->comm_key);
    return COH_OK;
}
