/* collective_net.h: the connections between the processes of a multi-process run on the CPU, and
 * the one operation collectives need over them: every process of a group sends its participants'
 * posts to every other process of the group and receives theirs. Plain POSIX TCP sockets, a full
 * mesh (one connection per pair of processes, made at start-up). Knows nothing of the IR, MLIR or
 * Python; who the processes are and where they listen comes from the caller (python/kiln's
 * coordination service). */
#ifndef KL_COLLECTIVE_NET_H
#define KL_COLLECTIVE_NET_H
#include <stddef.h>

/* Opens this process's listening socket on host (a numeric address; "" every interface), port
 * chosen by the system. The port, or -1 with a message. */
int kl_net_listen(const char *host, char *err, size_t errlen);

/* Connects this process (id me of nprocs) to every other: it connects to the processes of lower
 * id (hosts[p]:ports[p]) and accepts the connections of those of higher id on the socket of
 * kl_net_listen, all within timeout_s seconds. exchange_timeout_s bounds each later exchange's
 * wait for a peer that sends nothing. 0, or -1 with a message (nothing stays open). */
int kl_net_connect(int me, int nprocs, const char *const *hosts, const int *ports, double timeout_s,
                   double exchange_timeout_s, char *err, size_t errlen);

/* Closes every connection and the listening socket (after which exchanges fail). */
void kl_net_close(void);

/* This process's id, or -1 when not connected. */
int kl_net_process(void);
/* For an SPMD launch of n devices in a group of `size` ranks, rank r run by process procs[r]:
 * this process's id, or -1 with a message when the processes are not connected or the group gives
 * this process other than n ranks (`what` names the devices: "devices", "GPUs"). */
int kl_net_span_process(int size, const int *procs, int n, const char *what, char *err, size_t errlen);

/* One exchange of a group of n ranks, rank r run by process procs[r]: posts[r] (nbytes each) is
 * set for this process's ranks; the other processes' posts are received into recv (room for
 * nbytes per rank of another process, filled in rank order) and posts[r] of those ranks set to
 * them. Each process of the group takes part once per collective, in the same order. 0, or -1
 * with a message naming the peer (a dead connection, an abort a peer sent, a peer silent for the
 * timeout, or a peer that is out of step); after a failure the connections are unusable and
 * every later exchange fails at once. */
int kl_net_exchange(int n, const int *procs, const void **posts, size_t nbytes, char *recv, char *err,
                    size_t errlen);

/* Tells the other processes of a group (n ranks over procs) that this one failed, with why (they
 * raise it instead of waiting for their timeout), then closes the connections. Best effort. */
void kl_net_abort(int n, const int *procs, const char *why);
#endif
