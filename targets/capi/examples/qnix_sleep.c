/*
 * QNIX with an event loop: processes 0 and 1 exchange short sends, each watching its
 * receive context's doorbell in the HPS and sleeping in poll(2) on Volley's wake-up
 * descriptor while it is busy (the NIC's work rings it), instead of spinning. A
 * sleep of 10 s with a send on its way is a lost wake-up. Argument: round trips
 * (default 2000). The process id is the launcher's rank (VOLLEY_RANK).
 *
 *   volley run -n 2 -- ./qnix_sleep
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <qnix.h>
#include <volley.h>

static int fail(int me, const char *what)
{
    fprintf(stderr, "qnix_sleep: process %d: %s (last error %s)\n", me, what,
            qx_strerror(qx_last_error()));
    return 1;
}

/* Sleeps until `*bell` is no longer busy. How many times it slept, or -1 for a lost
 * wake-up or an error. */
static long await_bell(volatile int *bell, int fd)
{
    long slept = 0;
    struct pollfd p;
    int rc;
    p.fd = fd;
    p.events = POLLIN;
    while (*bell == QX_BUSY) {
        rc = volley_arm(); /* a step of the NIC's work, the doorbells copied */
        if (rc < 0)
            return -1;
        if (rc > 0 || *bell != QX_BUSY)
            continue;
        slept++;
        if (poll(&p, 1, 10000) == 0)
            return -1;
    }
    return slept;
}

int main(int argc, char **argv)
{
    const char *rank = getenv("VOLLEY_RANK");
    int me = rank ? atoi(rank) : 0, rounds = argc > 1 ? atoi(argv[1]) : 2000;
    int name[2] = {1, me}, peer[2] = {1, 1 - me};
    int i, r, s, c, fd;
    long slept = 0, n;
    unsigned long v;
    qx_hps_t *hps = qx_init(name, 1, 2);
    if (hps == NULL)
        return fail(me, "qx_init");
    if (qx_buffer_pool(1) != 0)
        return fail(me, "qx_buffer_pool");
    if ((fd = volley_wakeup_fd()) < 0)
        return 1;
    c = qx_send_context(NULL, 0, 1, 0, 0, -1, NULL);
    if (c < 0 || qx_barrier(c, 1, 2) != 0 || qx_poll_for_send(c) != 0)
        return fail(me, "barrier");
    for (i = 0; i < rounds; i++) {
        r = qx_recv_context(peer, 1, 1, 1, (long)sizeof v, 0, NULL);
        if (r < 0 || qx_receive(r) != 0)
            return fail(me, "receive");
        v = (unsigned long)i;
        if (me == 0) {
            s = qx_send_context(peer, 1, 1, 1, (long)sizeof v, -1, &v);
            if (s < 0 || qx_send_short(s) != 0 || qx_poll_for_send(s) != 0)
                return fail(me, "send");
        }
        if ((n = await_bell(&hps->recv_doorbell[r], fd)) < 0) {
            fprintf(stderr, "qnix_sleep: process %d: lost wake-up at round %d\n", me, i);
            return 1;
        }
        slept += n;
        if (qx_poll_for_receive(r) != (int)sizeof v)
            return fail(me, "poll_for_receive");
        memcpy(&v, hps->buffer_pool, sizeof v);
        if (v != (unsigned long)i) {
            fprintf(stderr, "qnix_sleep: process %d: round %d got %lu\n", me, i, v);
            return 1;
        }
        if (me == 1) {
            s = qx_send_context(peer, 1, 1, 1, (long)sizeof v, -1, &v);
            if (s < 0 || qx_send_short(s) != 0 || qx_poll_for_send(s) != 0)
                return fail(me, "send");
        }
    }
    c = qx_send_context(NULL, 0, 1, 0, 0, -1, NULL);
    if (c < 0 || qx_barrier(c, 1, 2) != 0 || qx_poll_for_send(c) != 0)
        return fail(me, "barrier");
    if (qx_end(name) != 0)
        return fail(me, "qx_end");
    printf("process %d: qnix_sleep ok, %d sends, slept %ld times\n", me, rounds, slept);
    return 0;
}
