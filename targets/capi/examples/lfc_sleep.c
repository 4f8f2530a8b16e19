/*
 * LFC with an event loop: processes 0 and 1 exchange packets, each sleeping in
 * poll(2) on Volley's wake-up descriptor while it waits for the next one instead of
 * spinning in lfc_poll. A sleep of 10 s with a packet on its way is a lost wake-up.
 * Argument: round trips (default 2000).
 *
 *   volley run -n 2 -- ./lfc_sleep
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <lfc.h>
#include <volley.h>

static volatile unsigned nreceived;

int lfc_upcall(unsigned src, void *data, unsigned size, lfc_upcall_flags_t flags)
{
    (void)src;
    (void)size;
    (void)flags;
    nreceived++;
    lfc_packet_free(data);
    return 1;
}

/* Polls until `n` packets have come, sleeping between polls that find nothing.
 * How many times it slept, or -1 for a lost wake-up or an error. */
static long await_packets(unsigned n, int fd)
{
    long slept = 0;
    struct pollfd p;
    int rc;
    p.fd = fd;
    p.events = POLLIN;
    for (;;) {
        lfc_poll();
        if (nreceived >= n)
            return slept;
        rc = volley_arm();
        if (rc < 0)
            return -1;
        if (rc > 0)
            continue;
        slept++;
        if (poll(&p, 1, 10000) == 0)
            return -1;
    }
}

int main(int argc, char **argv)
{
    unsigned i, rounds, me;
    long slept = 0, s;
    int fd;
    void *pkt;
    lfc_init(&argc, argv);
    lfc_start();
    rounds = argc > 1 ? (unsigned)atoi(argv[1]) : 2000;
    me = lfc_my_proc();
    if (lfc_nr_procs() != 2) {
        fprintf(stderr, "lfc_sleep: needs 2 processes\n");
        return 2;
    }
    if ((fd = volley_wakeup_fd()) < 0)
        return 1;
    for (i = 0; i < rounds; i++) {
        if (me == 0) {
            pkt = lfc_send_alloc(1);
            ((unsigned *)pkt)[0] = i;
            lfc_ucast_launch(1, pkt, sizeof i, 1);
        }
        if ((s = await_packets(i + 1, fd)) < 0) {
            fprintf(stderr, "lfc_sleep: process %u: lost wake-up at round %u\n", me, i);
            return 1;
        }
        slept += s;
        if (me == 1) {
            pkt = lfc_send_alloc(1);
            ((unsigned *)pkt)[0] = i;
            lfc_ucast_launch(0, pkt, sizeof i, 1);
        }
    }
    printf("process %u: lfc_sleep ok, %u packets, slept %ld times\n", me, rounds, slept);
    lfc_exit();
    return 0;
}
