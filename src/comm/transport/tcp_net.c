/* tcp_net.c: the TCP transport's sockets: the process's listener, connecting, the
 * challenge-response handshake of every data connection (HMAC-SHA256 over fresh nonces with the
 * per-attempt key the launcher hands each worker in COHORT_COMM_KEY), and accepting the
 * connections of a group while strangers are closed and connections of other groups wait. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "cohort/clock.h"
#include "cohort/log.h"
#include "comm/transport/tcp_int.h"

#define HANDSHAKE_S 5.0 /* a connection that has not proved itself by then is closed */

typedef struct stash_ent {
    uint64_t gid;
    int from, fd;
} stash_ent;

static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static int g_listen = -1;
static tcp_addr g_bound;
static unsigned char g_key[64];
static size_t g_klen;
static int g_key_done;
static stash_ent *g_stash;
static int g_nstash, g_capstash;

void tcp_addr_text(const tcp_addr *a, char *buf, size_t n)
{
    char ip[INET_ADDRSTRLEN] = "?";
    struct in_addr in = {a->ip};
    inet_ntop(AF_INET, &in, ip, sizeof ip);
    snprintf(buf, n, "%s:%u", ip, (unsigned)ntohs(a->port));
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

coh_status tcp_key_init(void)
{
    pthread_mutex_lock(&g_mu);
    coh_status st = COH_OK;
    if (!g_key_done) {
        const char *s = getenv("COHORT_COMM_KEY");
        size_t n = s ? strlen(s) : 0;
        if (s && (n < 32 || n > 2 * sizeof g_key || n % 2)) {
            st = coh_errf(COH_ERR_INVALID, "invalid COHORT_COMM_KEY (%zu characters): expected "
                          "32 to %zu hex digits, as 'cohort run' sets it", n, 2 * sizeof g_key);
        } else if (s) {
            for (size_t i = 0; i < n / 2 && !st; i++) {
                int hi = hexval(s[2 * i]), lo = hexval(s[2 * i + 1]);
                if (hi < 0 || lo < 0)
                    st = coh_errf(COH_ERR_INVALID, "invalid COHORT_COMM_KEY: '%c%c' is not hex",
                                  s[2 * i], s[2 * i + 1]);
                g_key[i] = (unsigned char)(hi << 4 | (lo & 15));
            }
            g_klen = n / 2;
        } else {
            coh_warn("comm: tcp: no COHORT_COMM_KEY: data connections are not authenticated "
                     "(use on a trusted network only; 'cohort run' sets one)");
        }
        g_key_done = !st;
    }
    pthread_mutex_unlock(&g_mu);
    return st;
}

/* HMAC(key, label | hello | nonce of the acceptor). */
static void mac_of(char label, const tcp_hello *h, const uint8_t *nonce, uint8_t out[TCP_MAC])
{
    unsigned char msg[1 + sizeof *h + TCP_NONCE];
    static const unsigned char none = 0;
    unsigned int len = TCP_MAC;
    msg[0] = (unsigned char)label;
    memcpy(msg + 1, h, sizeof *h);
    memcpy(msg + 1 + sizeof *h, nonce, TCP_NONCE);
    if (!HMAC(EVP_sha256(), g_klen ? g_key : &none, (int)g_klen, msg, sizeof msg, out, &len))
        memset(out, 0, TCP_MAC);
}

static int wait_fd(int fd, short ev, double deadline)
{
    double left = deadline - coh_now_s();
    if (left <= 0)
        return -2;
    struct pollfd p = {fd, ev, 0};
    int ms = left > 1 ? 1000 : (int)(left * 1000) + 1;
    int r = poll(&p, 1, ms);
    return r < 0 && errno != EINTR ? -1 : 0;
}

int tcp_io_full(int fd, void *buf, size_t len, int send_, double deadline)
{
    char *p = buf;
    size_t off = 0;
    while (off < len) {
        ssize_t k = send_ ? send(fd, p + off, len - off, MSG_NOSIGNAL)
                          : recv(fd, p + off, len - off, 0);
        if (k > 0) {
            off += (size_t)k;
            continue;
        }
        if (k == 0 && !send_) {
            errno = 0;
            return -1;
        }
        if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
            return -1;
        int w = wait_fd(fd, send_ ? POLLOUT : POLLIN, deadline);
        if (w)
            return w;
    }
    return 0;
}

void tcp_sock_setup(int fd, double timeout)
{
    int one = 1, idle = (int)(timeout / 3), intvl = 1, cnt = 127;
    unsigned int ms = (unsigned int)(timeout * 1000);
    idle = idle < 1 ? 1 : idle;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    fcntl(fd, F_SETFD, FD_CLOEXEC);
    /* a peer whose machine or link is gone sends no FIN: the kernel ends the connection after
     * the comm timeout instead of its default of minutes to hours (as the control channel) */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl);
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt);
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms);
}

coh_status tcp_listener(uint32_t ip, int port, tcp_addr *bound)
{
    pthread_mutex_lock(&g_mu);
    coh_status st = COH_OK;
    if (g_listen < 0) {
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                 .sin_addr.s_addr = ip};
        socklen_t sl = sizeof sa;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        int ok = fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        if (!ok && fd >= 0 && errno == EADDRNOTAVAIL) { /* not a local address: every one */
            sa.sin_addr.s_addr = htonl(INADDR_ANY);
            ok = bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
        }
        if (ok && listen(fd, 256) == 0 && getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) {
            g_listen = fd;
            g_bound.ip = sa.sin_addr.s_addr ? sa.sin_addr.s_addr : ip;
            g_bound.port = sa.sin_port;
        } else {
            tcp_addr a = {ip, htons((uint16_t)port), 0};
            char t[64];
            tcp_addr_text(&a, t, sizeof t);
            st = coh_errf(COH_ERR_SYSTEM, "tcp transport: cannot listen on %s: %s%s", t,
                          strerror(errno), port ? " (COHORT_COMM_PORT picks another port)" : "");
            if (fd >= 0)
                close(fd);
        }
    }
    if (!st)
        *bound = g_bound;
    pthread_mutex_unlock(&g_mu);
    return st;
}

static int connect_once(const tcp_addr *a, double deadline, int *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = a->port, .sin_addr.s_addr = a->ip};
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0)
        return fd;
    while (errno == EINPROGRESS || errno == EINTR) {
        struct pollfd p = {fd, POLLOUT, 0};
        double left = deadline - coh_now_s();
        if (left <= 0) {
            errno = ETIMEDOUT;
            break;
        }
        if (poll(&p, 1, left > 1 ? 1000 : (int)(left * 1000) + 1) <= 0)
            continue;
        int e = 0;
        socklen_t el = sizeof e;
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el);
        if (!e)
            return fd;
        errno = e;
        break;
    }
    *err = errno;
    close(fd);
    return -1;
}

coh_status tcp_connect(const tcp_addr *a, double deadline, const char *who, int *out)
{
    int err = 0;
    for (;;) {
        int fd = connect_once(a, deadline, &err);
        if (fd >= 0) {
            *out = fd;
            return COH_OK;
        }
        if (coh_now_s() >= deadline)
            break;
        struct timespec ts = {0, 50 * 1000 * 1000}; /* not up yet: try again shortly */
        nanosleep(&ts, NULL);
    }
    char t[64];
    tcp_addr_text(a, t, sizeof t);
    return coh_errf(COH_ERR_TIMEOUT, "tcp transport: cannot reach %s at %s: %s", who, t,
                    strerror(err));
}

coh_status tcp_handshake_out(int fd, uint64_t gid, int from, int to, int to_world,
                             double deadline)
{
    tcp_hello h = {TCP_MAGIC, TCP_VERSION, gid, from, to, {0}};
    tcp_reply r;
    uint8_t mine[TCP_MAC], ack = 0;
    if (RAND_bytes(h.nonce, TCP_NONCE) != 1)
        return coh_errf(COH_ERR_SYSTEM, "tcp transport: OpenSSL RAND_bytes failed");
    int rc = tcp_io_full(fd, &h, sizeof h, 1, deadline);
    if (!rc)
        rc = tcp_io_full(fd, &r, sizeof r, 0, deadline);
    if (rc == -2)
        return coh_errf(COH_ERR_TIMEOUT, "tcp transport: rank %d did not answer the handshake",
                        to_world);
    if (rc)
        return coh_errf(COH_ERR_PEER_LOST, "tcp transport: rank %d closed the connection during "
                        "the handshake", to_world);
    mac_of('A', &h, r.nonce, mine);
    if (CRYPTO_memcmp(mine, r.mac, TCP_MAC) != 0)
        return coh_errf(COH_ERR_INVALID, "tcp transport: the listener of rank %d failed the "
                        "handshake: it holds another key (another job, or a stranger)",
                        to_world);
    mac_of('C', &h, r.nonce, mine);
    rc = tcp_io_full(fd, mine, sizeof mine, 1, deadline);
    if (!rc)
        rc = tcp_io_full(fd, &ack, 1, 0, deadline);
    if (rc || ack != 'K')
        return coh_errf(COH_ERR_INVALID, "tcp transport: rank %d refused this rank's handshake "
                        "(another COHORT_COMM_KEY: is it another job's?)", to_world);
    return COH_OK;
}

static void drop(int fd, const char *why)
{
    char peer[64] = "?";
    struct sockaddr_in sa;
    socklen_t sl = sizeof sa;
    if (getpeername(fd, (struct sockaddr *)&sa, &sl) == 0) {
        tcp_addr a = {sa.sin_addr.s_addr, sa.sin_port, 0};
        tcp_addr_text(&a, peer, sizeof peer);
    }
    coh_warn("comm: tcp: closed a connection from %s: %s", peer, why);
    close(fd);
}

/* Acceptor side: fills *h on success; strangers are closed here. */
static int handshake_in(int fd, tcp_hello *h, double deadline)
{
    double dl = coh_now_s() + HANDSHAKE_S;
    dl = dl < deadline ? dl : deadline;
    tcp_reply r;
    uint8_t theirs[TCP_MAC], want[TCP_MAC], ack = 'K';
    int rc = tcp_io_full(fd, h, sizeof *h, 0, dl);
    if (rc || tcp_hello_check(h, 0)) {
        drop(fd, rc == -2 ? "silent past the handshake deadline" : "not a cohort hello");
        return -1;
    }
    if (RAND_bytes(r.nonce, TCP_NONCE) != 1) {
        drop(fd, "no random nonce");
        return -1;
    }
    mac_of('A', h, r.nonce, r.mac);
    rc = tcp_io_full(fd, &r, sizeof r, 1, dl);
    if (!rc)
        rc = tcp_io_full(fd, theirs, sizeof theirs, 0, dl);
    mac_of('C', h, r.nonce, want);
    if (rc || CRYPTO_memcmp(theirs, want, TCP_MAC) != 0) {
        drop(fd, rc ? "no proof of the key" : "wrong key (a stranger, or another job)");
        return -1;
    }
    if (tcp_io_full(fd, &ack, 1, 1, dl)) {
        drop(fd, "gone after the handshake");
        return -1;
    }
    return 0;
}

static int stash_take(uint64_t gid, const char *want, int size, int *fd)
{
    int took = 0;
    for (int i = 0; i < g_nstash;) {
        stash_ent *e = &g_stash[i];
        if (e->gid == gid && e->from < size && want[e->from] && fd[e->from] < 0) {
            fd[e->from] = e->fd;
            *e = g_stash[--g_nstash];
            took++;
        } else {
            i++;
        }
    }
    return took;
}

static void stash_put(const tcp_hello *h, int c)
{
    if (g_nstash == g_capstash) {
        int cap = g_capstash ? 2 * g_capstash : 16;
        stash_ent *n = realloc(g_stash, sizeof *n * (size_t)cap);
        if (!n) {
            close(c);
            return;
        }
        g_stash = n;
        g_capstash = cap;
    }
    g_stash[g_nstash++] = (stash_ent){h->gid, h->from, c};
}

static coh_status missing(const char *want, int size, const int *fd, const int *world,
                          double timeout)
{
    char list[256] = "";
    size_t k = 0;
    for (int r = 0; r < size && k < sizeof list - 16; r++)
        if (want[r] && fd[r] < 0)
            k += (size_t)snprintf(list + k, sizeof list - k, "%s%d", k ? ", " : "", world[r]);
    return coh_errf(COH_ERR_TIMEOUT, "tcp transport: rank %s never joined (waited %g s)",
                    list, timeout);
}

coh_status tcp_accept_group(uint64_t gid, const char *want, int size, int *fd, const int *world,
                            double deadline)
{
    double t0 = coh_now_s();
    int left = 0;
    for (int r = 0; r < size; r++)
        left += want[r] && fd[r] < 0;
    pthread_mutex_lock(&g_mu);
    left -= stash_take(gid, want, size, fd);
    coh_status st = COH_OK;
    while (left > 0 && !st) {
        int w = wait_fd(g_listen, POLLIN, deadline);
        if (w == -2) {
            st = missing(want, size, fd, world, deadline - t0);
            break;
        }
        int c = accept4(g_listen, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (c < 0)
            continue;
        tcp_hello h;
        if (handshake_in(c, &h, deadline))
            continue;
        if (h.gid != gid) {
            stash_put(&h, c); /* another group's, whose split comes later */
        } else if (h.from >= size || !want[h.from] || fd[h.from] >= 0) {
            drop(c, "a rank this group did not expect");
        } else {
            fd[h.from] = c;
            left--;
        }
    }
    pthread_mutex_unlock(&g_mu);
    return st;
}
