/* tcp_int.h: the TCP transport's instance, its wire messages and the socket layer shared by
 * tcp.c (the ops), tcp_net.c (sockets, handshake, rendezvous) and tcp_wire.c (parsers). */
#ifndef COHORT_COMM_TCP_INT_H
#define COHORT_COMM_TCP_INT_H

#include <stddef.h>
#include <stdint.h>

#include "comm/comm_int.h"

#define TCP_MAGIC 0x54484f43u   /* "COHT" read as little-endian */
#define TCP_VERSION 1u
#define TCP_NONCE 16
#define TCP_MAC 32
#define TCP_PORT_OFFSET 2       /* MASTER_PORT + 2: MASTER_PORT is torch's store, +1 cohort's
                                   control channel (when the launcher gives no COHORT_COMM_PORT) */
#define TCP_TABLE_MAX 65536     /* ranks a rendezvous table may hold */

/* Where a rank listens (IPv4, network byte order). */
typedef struct tcp_addr {
    uint32_t ip;
    uint16_t port;
    uint16_t pad;
} tcp_addr;

/* The first message of every connection, from the side that connects. */
typedef struct tcp_hello {
    uint32_t magic, version;
    uint64_t gid;  /* the group this connection belongs to */
    int32_t from;  /* the connector's rank in that group */
    int32_t to;    /* the rank it wants */
    uint8_t nonce[TCP_NONCE];
} tcp_hello;

/* The acceptor's answer: its nonce and its proof; the connector then sends its own proof. */
typedef struct tcp_reply {
    uint8_t nonce[TCP_NONCE];
    uint8_t mac[TCP_MAC];
} tcp_reply;

/* Rendezvous: a rank tells rank 0 where it listens and how large it thinks the world is. */
typedef struct tcp_join {
    uint32_t magic;
    int32_t world;
    tcp_addr addr;
} tcp_join;

typedef struct tcp {
    int rank, size;
    uint64_t gid;
    int *fd;        /* (size) connection to every other rank; -1 for self */
    int *world;     /* (size) rank in the world communicator, for messages */
    tcp_addr *addr; /* (size) where each rank listens, for splits */
    coh_fp *fps;    /* (size) */
    const void **src; /* (size) sources of a reduction, in rank order */
    double timeout;
    void *tmp;
    size_t tmp_bytes;
    coh_status broken; /* a stream out of step (a peer lost mid-message): every call fails */
} tcp;

/* ---- wire (tcp_wire.c): parsers of bytes from the network ---- */
/* Checks a hello: magic, version, ranks within 0..size-1 when size > 0. 0 ok, -1 bad. */
int tcp_hello_check(const tcp_hello *h, int size);
/* Parses rank 0's table: u32 magic, i32 n, n tcp_addr. want: the world size expected. Writes
 * a reason on failure. 0 ok, -1 bad. */
int tcp_table_parse(const void *buf, size_t len, int want, tcp_addr *out, char *why, size_t n);
size_t tcp_table_bytes(int n);
void tcp_table_write(void *buf, const tcp_addr *addrs, int n);
/* A child group's id from its parent's and the split's tag. */
uint64_t tcp_gid_child(uint64_t parent, uint64_t tag);
uint64_t tcp_gid_of_text(const char *s);

/* ---- sockets (tcp_net.c) ---- */
/* Full transfer on a non-blocking socket, waiting in poll() until deadline: 0 done, -1 the
 * peer closed or failed (errno set, 0 for an orderly close), -2 deadline passed. */
int tcp_io_full(int fd, void *buf, size_t len, int send, double deadline);
/* Data-socket options: non-blocking, TCP_NODELAY, keepalive with TCP_USER_TIMEOUT. */
void tcp_sock_setup(int fd, double timeout);
/* Connect to a, retrying until the deadline (the listener may not be up yet). */
coh_status tcp_connect(const tcp_addr *a, double deadline, const char *who, int *out);
/* Connector side of the handshake. */
coh_status tcp_handshake_out(int fd, uint64_t gid, int from, int to, int to_world,
                             double deadline);
/* Accept every connection of group gid from the ranks in `want` (want[r] != 0) into fd[r],
 * stashing connections of other groups for later; strangers are closed and logged. */
coh_status tcp_accept_group(uint64_t gid, const char *want, int size, int *fd, const int *world,
                            double deadline);
/* The process's listener (made on first use on ip, port 0 = any). */
coh_status tcp_listener(uint32_t ip, int port, tcp_addr *bound);
/* Loads the per-attempt key from COHORT_COMM_KEY (hex); none: a warning, once. */
coh_status tcp_key_init(void);
void tcp_addr_text(const tcp_addr *a, char *buf, size_t n);

/* ---- the world (tcp_open.c) ---- */
coh_status coh_tcp_open(const coh_comm_env *env, void **self);
tcp *tcp_new(int rank, int size, uint64_t gid, double timeout);
void tcp_free(tcp *t);
/* Connects every pair of ranks of t that are not yet connected (lower ranks are called,
 * higher ranks call in). */
coh_status tcp_mesh(tcp *t, double deadline);

#endif
