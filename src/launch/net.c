/* net.c: the launcher's TCP plumbing: free ports, "is this port taken", and the control
 * connection between the launchers of a multi-node job. */
#define _GNU_SOURCE /* accept4, pipe2, sigabbrev_np, sched_setaffinity */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "cohort/clock.h"
#include "cohort/log.h"
#include "launch/launch_int.h"

/* A socket bound to the port on all interfaces; SO_REUSEADDR as PyTorch's store uses, so that
 * only a live listener (not TIME_WAIT leftovers) makes the port "in use". */
static int bind_any(int port, int *err)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_ANY)};
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    return fd;
}

coh_status net_free_port(int *port)
{
    int err = 0, fd = bind_any(0, &err);
    if (fd < 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot find a free port: %s", strerror(err));
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        err = errno;
        close(fd);
        return coh_errf(COH_ERR_SYSTEM, "cannot find a free port: %s", strerror(err));
    }
    *port = ntohs(a.sin_port);
    close(fd);
    return COH_OK;
}

coh_status net_check_port(int port, const char *what)
{
    int err = 0, fd = bind_any(port, &err);
    if (fd < 0 && err == EADDRINUSE)
        return coh_errf(COH_ERR_BUSY, "%s '%d' is already in use on this machine (choose another with --master-port, or 0 for a free one)", what, port);
    if (fd < 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot use %s '%d': %s", what, port, strerror(err));
    close(fd);
    return COH_OK;
}

/* A socket bound to host's IPv4 address at port; -1 with *err (EADDRNOTAVAIL when the address
 * is not this machine's, or host does not resolve to an IPv4 address). */
static int bind_host(const char *host, int port, int *err)
{
    struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
    if (!host || getaddrinfo(host, NULL, &hints, &res) != 0 || !res) {
        *err = EADDRNOTAVAIL;
        return -1;
    }
    struct sockaddr_in a = *(struct sockaddr_in *)res->ai_addr;
    freeaddrinfo(res);
    a.sin_port = htons((uint16_t)port);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        *err = errno;
        return -1;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        *err = errno;
        close(fd);
        return -1;
    }
    return fd;
}

coh_status net_listen(const char *host, int port, int *out)
{
    int err = 0, fd = bind_host(host, port, &err);
    if (fd < 0 && err == EADDRNOTAVAIL) {
        coh_info("master address '%s' is not an address of this machine: the control port "
                 "listens on every interface", host ? host : "");
        fd = bind_any(port, &err);
    }
    if (fd < 0 && err == EADDRINUSE)
        return coh_errf(COH_ERR_BUSY, "control port '%d' is already in use on this machine (choose another with --control-port)", port);
    if (fd < 0 || listen(fd, 128) < 0) {
        if (fd >= 0) {
            err = errno;
            close(fd);
        }
        return coh_errf(COH_ERR_SYSTEM, "cannot listen on control port '%d': %s", port, strerror(err));
    }
    *out = fd;
    return COH_OK;
}

void net_peer_name(int fd, char *buf, size_t n)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof ss;
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0 && ss.ss_family == AF_INET) {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
    } else if (ss.ss_family == AF_INET6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
    }
    snprintf(buf, n, "%s:%d", host, port);
}

static int connect_once(const char *host, int port, int *err)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0) {
        *err = -rc;
        return -2;
    }
    int fd = -1;
    for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
            break;
        *err = errno;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd >= 0) {
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    }
    return fd;
}

coh_status net_connect_retry(const char *host, int port, double deadline, int *out)
{
    int err = 0;
    for (;;) {
        int fd = connect_once(host, port, &err);
        if (fd >= 0) {
            *out = fd;
            return COH_OK;
        }
        if (fd == -2)
            return coh_errf(COH_ERR_INVALID, "invalid master address '%s': %s", host, gai_strerror(-err));
        if (coh_now_s() >= deadline)
            return coh_errf(COH_ERR_TIMEOUT, "node 0's launcher at %s:%d did not answer in time (last error: %s)", host, port, strerror(err));
        struct timespec ts = {0, 100 * 1000 * 1000}; /* the master may not be up yet */
        nanosleep(&ts, NULL);
    }
}

/* The kernel ends a connection whose other end stops answering (its machine or link gone, no FIN
 * or RST ever coming): keepalive probes once it is idle for a third of the timeout, then one a
 * second, and TCP_USER_TIMEOUT aborts it (ETIMEDOUT) when nothing has been acknowledged for
 * the whole timeout, idle or with data in flight. Detection then takes at most timeout + 1 s
 * after the last word from the other end, instead of the kernel's default of two hours (idle)
 * or about fifteen minutes (unacknowledged data). */
coh_status net_keepalive(int fd, double timeout_s)
{
    int one = 1, idle = (int)(timeout_s / 3), intvl = 1, cnt = 127;
    unsigned int ms = (unsigned int)(timeout_s * 1000);
    if (idle < 1)
        idle = 1;
    if (setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof idle) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof intvl) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof cnt) < 0 ||
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &ms, sizeof ms) < 0)
        return coh_errf(COH_ERR_SYSTEM, "cannot set TCP keepalive on the control connection: %s", strerror(errno));
    return COH_OK;
}

int net_send_line(int fd, const char *s)
{
    size_t len = strlen(s), off = 0;
    while (off < len) {
        ssize_t w = send(fd, s + off, len - off, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        off += (size_t)w;
    }
    return 0;
}
