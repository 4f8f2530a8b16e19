/*
 * lfc.h: the LFC packet interface (LFC User Guide 2.0, VU Amsterdam, 1999), on Volley.
 *
 * Every call of the guide, with its name and signature. Link with libvolley
 * (pkg-config: volley). Start the processes with `volley run -n N -- ./prog`,
 * `mpiexec -n N ./prog`, `srun`, or as the guide does: `-lfc-hosts a,b` on each
 * host, or HOSTS set and the rank and process count as argv[1] and argv[2]. A
 * program started by none of them is a job of one process, which sends to itself.
 *
 * lfc_init() is a macro that hands the program's lfc_upcall to the library; call
 * it as the guide does, lfc_init(&argc, argv). Options: -lfc-hosts, -lfc-use-hosts,
 * -lfc-verbose, -lfc-ring-frames, -lfc-no-intr, -lfc-interval, -lfc-intr-first,
 * -lfc-stats, -lfc-lcp (accepted, no control program to load), -lfc-tree
 * binary|binomial|chain, -lfc-routes (accepted, the fabric routes); or LFC_<PARAM>
 * variables (HOSTS, ROUTES). A bad option is one line on stderr and exit 1.
 *
 * Packets: lfc_send_alloc() returns a packet of the library's pool; the launch
 * queues it without a copy, and it is sent again from there if the network loses
 * it (Volley recovers lost and corrupted packets; the original did not).
 * Received packets are lent to lfc_upcall; one kept (nonzero return) holds a
 * receive slot until lfc_packet_free(); with all slots held, senders wait.
 *
 * Interrupts: a progress thread stands in for the NIC's interrupt. With
 * interrupts enabled (lfc_intr_enable after lfc_start) and no LFC call for
 * -lfc-intr-first microseconds (50 by default: the polling watchdog), it runs the
 * upcalls itself, on its own thread: data the program shares with lfc_upcall is
 * `volatile` (or atomic), as in the guide's example. A program that polls is never
 * interrupted. -lfc-no-intr: no thread.
 *
 * Threads: every call takes one process lock, so calls from several threads are
 * serialised (the original was not thread safe); an upcall runs with it held, and
 * the LFC calls it makes are allowed. Errors: calls that return nothing report
 * misuse (a pointer that is no packet, a size above lfc_packet_size()) and a
 * process that died as one line on stderr and exit 1.
 */
#ifndef VOLLEY_LFC_H
#define VOLLEY_LFC_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { LFC_NO_INTR, LFC_INTR } lfc_intr_t;
typedef enum { LFC_UPCALL_MCAST = 0x1 } lfc_upcall_flags_t;

/* Initialisation and clean-up (2.1) */
typedef int (*volley_lfc_upcall_t)(unsigned src, void *packet, unsigned size,
                                   lfc_upcall_flags_t flags);
void volley_lfc_init(int *argc, char **argv, volley_lfc_upcall_t upcall);
#define lfc_init(argc, argv) volley_lfc_init((argc), (argv), lfc_upcall)
int lfc_group_create(unsigned *members, unsigned nr_members);
void lfc_start(void);
void lfc_exit(void);

/* Configuration information (2.2) */
unsigned lfc_my_proc(void);
unsigned lfc_nr_procs(void);
unsigned lfc_packet_size(void);
void lfc_print_config(void);

/* Sending (2.3) */
void *lfc_send_alloc(int upcalls_allowed);
void lfc_ucast_launch(unsigned dest, void *packet, unsigned size, int upcalls_allowed);
void lfc_mcast_launch(int gid, void *packet, unsigned size, int upcalls_allowed);
void lfc_bcast_launch(void *packet, unsigned size, int upcalls_allowed);
void *lfc_memcpy(void *dst, const void *src, size_t n);

/* Receiving (2.4): lfc_upcall is the program's */
int lfc_upcall(unsigned src, void *packet, unsigned size, lfc_upcall_flags_t flags);
void lfc_poll(void);
void lfc_packet_free(void *packet);

/* Interrupt management (2.5) */
void lfc_intr_disable(void);
void lfc_intr_enable(void);
int lfc_intr_status(void);

/* Memory allocation (2.6): a separate heap, safe in upcalls */
void *lfc_malloc(size_t size);
void *lfc_calloc(size_t n, size_t size);
void *lfc_realloc(void *p, size_t size);
void lfc_free(void *p);

/* Timer (2.7) */
void lfc_timer_start(void);
void lfc_timer_stop(void);
double lfc_timer_elapsed(void);
void lfc_timer_delta(unsigned microsec);

/* Fetch and add (2.8) */
unsigned lfc_fetch_and_add(unsigned dest, int upcalls_allowed);

/* Statistics (2.9) */
void lfc_stats_reset(void);
int lfc_stats_create(void);
void lfc_stats_gather(int statbuf);
void lfc_stats_dump(FILE *fp, int statbuf, char *hdr, char *ftr);

#ifdef __cplusplus
}
#endif

#endif
