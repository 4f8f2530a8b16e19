/*
 * The LFC User Guide's chapter-5 example (latency_simple.c), as printed there,
 * reassembled from the guide's figures 5.1 to 5.4. Only the includes differ:
 * <string.h> for strcmp, which the figures use without including it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lfc.h>

#define UPCALLS_ALLOWED 1

static char *progname;
static unsigned nsend = 10000;
static volatile unsigned nreceived;
static unsigned last_nr_received;
static unsigned pktsize;
static unsigned msgsize = 16;

static void
usage(void)
{
    fprintf(stderr, "Usage: %s <options>\n"
	    "\t-nsend <nrsends>\tnumber roundtrips\n"
	    "\t-size <msgsize>\tmessage size\n", progname);
    exit(EXIT_FAILURE);
}

static void
command_line(int argc, char **argv)
{
    unsigned i;

    progname = argv[0];
    for (i = 1; i < argc; i++) {
	if (strcmp(argv[i], "-nsend") == 0) {
	    if (++i >= argc) usage();
	    nsend = atoi(argv[i]);
	} else if (strcmp(argv[i], "-size") == 0) {
	    if (++i >= argc) usage();
	    msgsize = atoi(argv[i]);
	} else {
	    break;
	}
    }
}

/* Figure 5.1: Example application: argument processing */

int
lfc_upcall(unsigned src, void *data, unsigned size, lfc_upcall_flags_t flags)
{
    nreceived++;
    lfc_packet_free(data);	/* free packet ourselves */
    return 1;			/* return 1 to indicate that we are freeing it */
}

static inline void
await_messages(unsigned n, int poll)
{
    while (nreceived - last_nr_received < n) {
	if (poll) lfc_poll();
    }
    last_nr_received += n;
}

/* Figure 5.2: Example application: receiving packets */

/* Fragment the message buffer sendptr */
static void
send_large(unsigned dest, void *sendptr, unsigned size)
{
    void *pkt;

    while (size > pktsize) {
	pkt = lfc_send_alloc(UPCALLS_ALLOWED);
	lfc_memcpy(pkt, sendptr, pktsize);
	lfc_ucast_launch(dest, pkt, pktsize, UPCALLS_ALLOWED);
	size -= pktsize;
	sendptr += pktsize;
    }
    pkt = lfc_send_alloc(UPCALLS_ALLOWED);
    lfc_memcpy(pkt, sendptr, size);
    lfc_ucast_launch(dest, pkt, size, UPCALLS_ALLOWED);
}

static void
do_test(void *send_buf, int size, int poll)
{
    unsigned nr_packets;
    double elapsed;
    unsigned dest;
    unsigned i;
    void *pkt;

    if (!poll) lfc_intr_enable();

    dest = (lfc_my_proc() == 0 && lfc_nr_procs() > 1);

    nr_packets = (size + pktsize - 1) / pktsize;
    if (nr_packets == 0) nr_packets = 1;

    if (lfc_my_proc() == 0) {
	/* wait till receiver is ready too */
	if (lfc_nr_procs() > 1) await_messages(1, poll);

	lfc_timer_start();
	for (i = 0; i < nsend; i++) {
	    send_large(dest, send_buf, size);
	    await_messages(nr_packets, poll);
	}
	lfc_timer_stop();

	elapsed = lfc_timer_elapsed();
	elapsed /= nsend;
	if (lfc_nr_procs() > 1) elapsed /= 2;
	printf("Size %4u polling %d latency %3.1f microseconds\n",
	       size, poll, elapsed);
    } else if (lfc_my_proc() == 1) {
	/* tell sender I'm ready */
	pkt = lfc_send_alloc(1);
	lfc_ucast_launch(dest, pkt, 0, UPCALLS_ALLOWED);

	for (i = 0; i < nsend; i++) {
	    await_messages(nr_packets, poll);
	    send_large(dest, send_buf, size);
	}
    }

    if (!poll) lfc_intr_disable();
}

/* Figure 5.3: Example application: sending packets */

int
main(int argc, char **argv)
{
    void *sendbuf;

    lfc_init(&argc, argv);
    command_line(argc, argv);
    lfc_start();

    pktsize = lfc_packet_size();

    if (msgsize > 0) {
	sendbuf = malloc(msgsize);
	if (sendbuf == NULL) {
	    fprintf(stderr, "%s: out of memory\n", progname);
	    exit(EXIT_FAILURE);
	}
    } else {
	sendbuf = NULL;
    }

    do_test(sendbuf, msgsize, 1);
    do_test(sendbuf, msgsize, 0);

    if (sendbuf != NULL) free(sendbuf);

    lfc_exit();
    return 0;
}

/* Figure 5.4: Example application: main routine */
