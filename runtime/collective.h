/* collective.h: the participants of one SPMD launch (an executable launched once per device of a
 * mesh, runtime.h's kl_exec_launch_group) and their rendezvous: simulated CPU devices exchange
 * buffer pointers in process (the collective lowerings, codegen/lower/collective.c, then reduce,
 * gather or permute over them); a group may span processes (the other processes' posts come over
 * TCP, collective_net.h); GPUs go through NCCL (runtime/nccl.h), whose communicators between
 * processes get their ids through such an exchange. Knows nothing of the
 * IR, MLIR or Python. */
#ifndef KL_COLLECTIVE_H
#define KL_COLLECTIVE_H
#include <stddef.h>

/* A group of n participants (refcounted; one reference per launch of the group). */
typedef struct kl_coll_group kl_coll_group;

/* A new group of n >= 1 participants with one reference; NULL when out of host memory. */
kl_coll_group *kl_coll_group_new(int n);
/* A group of n ranks spanning processes: rank r runs in process procs[r] (copied), this process
 * (id me, collective_net.h's) runs those of procs[r] == me. Exchanges bring the other processes'
 * posts over the network. NULL when out of host memory. */
kl_coll_group *kl_coll_group_new_spanning(int n, const int *procs, int me);
void kl_coll_group_retain(kl_coll_group *g);
void kl_coll_group_release(kl_coll_group *g);
int kl_coll_group_size(const kl_coll_group *g);
/* Whether g's ranks run in several processes. */
int kl_coll_group_spans(const kl_coll_group *g);
/* The devices (ordinals of one kind) of the participants, for collectives that need them (NCCL's
 * communicators): set copies n of them (0, or -1 out of memory); get returns them (borrowed) or
 * NULL where none were set. */
int kl_coll_group_set_ordinals(kl_coll_group *g, const int *ordinals);
const int *kl_coll_group_ordinals(const kl_coll_group *g);

/* The participant the calling thread runs (set by the launch around its steps; NULL group: none,
 * the program runs alone). */
void kl_coll_set_current(kl_coll_group *g, int rank);
/* The calling thread's group (borrowed) and its rank, or NULL when it runs no group's launch. */
kl_coll_group *kl_coll_current(int *rank);

/* Participant `rank` posts `mine` (nbytes; every participant posts as many, for the same `what`: a
 * collective's name, static; this process's participants are checked to agree, and the group fails
 * naming both when they do not) and waits until every
 * participant has posted: returns the n posted pointers (borrowed, valid until
 * kl_coll_rendezvous; those of other processes' ranks point at copies received), or NULL with a
 * message when the group was aborted (a participant failed: the others must not wait for it
 * forever) or the network failed (a peer process died, aborted, or was silent for the timeout). */
const void *const *kl_coll_exchange(kl_coll_group *g, int rank, const void *mine, size_t nbytes, const char *what,
                                    char *err, size_t errlen);
/* Waits until this process's every participant is here (the other processes' are not waited for):
 * after an exchange, until every one is done reading the posts (then they may be overwritten and
 * their memory reused). 0, or -1 with a message when aborted. */
int kl_coll_rendezvous(kl_coll_group *g, char *err, size_t errlen);
/* Whether the participants meet (kl_coll_rendezvous) before and after each collective: a launch's
 * first on its GPUs. There a participant's thread may load a library's kernels lazily (cuBLAS's:
 * CUDA waits for the GPU to drain, holding a lock every thread of the process needs) while another
 * GPU's NCCL kernel waits for this thread's: a deadlock. Meeting around the collectives orders the
 * first launch's loading and NCCL's calls; later launches have nothing left to load. */
void kl_coll_group_set_careful(kl_coll_group *g, int on);
int kl_coll_group_careful(const kl_coll_group *g);
/* Marks g failed and wakes every waiter: later exchanges fail at once. A group spanning processes
 * also tells the other processes (why: the message they raise; NULL: a generic one). */
void kl_coll_abort(kl_coll_group *g, const char *why);
/* A participant of this process finished its program: when every other one still running waits at
 * a barrier it will never reach, the group fails (the devices took different paths) instead of
 * waiting forever. */
void kl_coll_finish(kl_coll_group *g);
#endif
