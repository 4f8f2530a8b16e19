/*
 * qnix_test.c: the QNIX API end to end.
 *
 *   volley run -n 5 -- ./qnix_test          contexts, tags, short and long sends,
 *                                            broadcast, multicast, join_group, barrier
 *   volley run -n 4 -- ./qnix_test apps      two applications (AI 7 and 9) in one job
 *   volley run -n 2 -- ./qnix_test spin      doorbells watched in the HPS, no calls
 *
 * The process id is the launcher's rank (VOLLEY_RANK, or PMI_RANK under mpiexec).
 * Every check prints what failed and exits 1.
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include <qnix.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (!(cond)) {                                                     \
            fprintf(stderr, "PI %d: check failed: %s: ", me, #cond);       \
            fprintf(stderr, __VA_ARGS__);                                  \
            fprintf(stderr, " (last error %s)\n", qx_strerror(qx_last_error())); \
            exit(1);                                                       \
        }                                                                  \
    } while (0)

static int me, n;

static int env_int(const char *a, const char *b) {
    const char *v = getenv(a);
    if (!v) v = getenv(b);
    return v ? atoi(v) : -1;
}

static unsigned char byte(int from, int to, int tag, long i) {
    return (unsigned char)(from * 31 + to * 7 + tag * 13 + i * 5 + i / 251);
}

static void fill(unsigned char *p, int from, int to, int tag, long len) {
    for (long i = 0; i < len; i++) p[i] = byte(from, to, tag, i);
}

static int same(const unsigned char *p, int from, int to, int tag, long len) {
    for (long i = 0; i < len; i++)
        if (p[i] != byte(from, to, tag, i)) return 0;
    return 1;
}

/* A barrier over group `g` of `size` through a fresh send context. */
static void barrier(int g, int size) {
    int c = qx_send_context(NULL, 0, 1, 0, 0, -1, NULL);
    CHECK(c >= 0, "barrier context");
    CHECK(qx_barrier(c, g, size) == 0, "qx_barrier %d", g);
    CHECK(qx_poll_for_send(c) == 0, "barrier %d", g);
}

static int recv_post(int ai, int from, int tag, long len, int page) {
    int name[2] = {ai, from};
    int c = qx_recv_context(name, tag, 1, (int)((len + QX_PAGE_SIZE - 1) / QX_PAGE_SIZE), len, page, NULL);
    CHECK(c >= 0, "recv context from %d tag %d", from, tag);
    CHECK(qx_receive(c) == 0, "qx_receive from %d tag %d", from, tag);
    return c;
}

static int apps(void) {
    /* Ranks 0 and 1: application 7; ranks 2 and 3: application 9, ids swapped. */
    int ai = me < 2 ? 7 : 9, pi = me < 2 ? me : 3 - me;
    int name[2] = {ai, pi};
    qx_hps_t *hps = qx_init(name, ai, 2);
    CHECK(hps != NULL, "qx_init");
    CHECK(hps->proc_name[0] == ai && hps->group_size == 2, "hps");
    CHECK(qx_buffer_pool(2) == 0, "pool");
    int peer[2] = {ai, 1 - pi};
    int r = recv_post(ai, 1 - pi, 5, 64, 0);
    char text[64];
    snprintf(text, sizeof text, "application %d process %d", ai, pi);
    int s = qx_send_context(peer, 5, 1, 1, (long)strlen(text) + 1, -1, (unsigned long *)text);
    CHECK(s >= 0 && qx_send_short(s) == 0 && qx_poll_for_send(s) == 0, "send");
    int got = qx_poll_for_receive(r);
    char want[64];
    snprintf(want, sizeof want, "application %d process %d", ai, 1 - pi);
    CHECK(got == (int)strlen(want) + 1 && strcmp(hps->buffer_pool, want) == 0, "got %d: %.60s", got,
          hps->buffer_pool);
    /* The other application's process with the same id is out of reach, once it
       has registered (until then its name is unknown here; each refused try gives
       its context back). */
    int other[2] = {ai == 7 ? 9 : 7, 1 - pi};
    int rc = QX_EUNKNOWN;
    for (int tries = 0; rc == QX_EUNKNOWN && tries < 5000; tries++) {
        int bad = qx_send_context(other, 5, 1, 1, 4, -1, (unsigned long *)text);
        CHECK(bad >= 0, "context for try %d", tries);
        rc = qx_send_short(bad);
        if (rc == QX_EUNKNOWN) {
            struct timespec ms = {0, 1000000};
            nanosleep(&ms, NULL);
        }
    }
    CHECK(rc == QX_EOTHERAPP, "cross-application send: %d", rc);
    barrier(ai, 2);
    CHECK(qx_end(name) == 0, "qx_end");
    printf("apps ok: application %d process %d\n", ai, pi);
    return 0;
}

/* Spins on an HPS doorbell, calling nothing, for at most 5 s: the NIC must move
   the data meanwhile. Returns the doorbell's last value. */
static int spin(volatile int *bell) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int b = *bell;
        if (b != QX_BUSY) return b;
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec >= 5) return b;
    }
}

/* Process 0 receives 64 KB from process 1; after posting, both only watch their
   doorbells in the HPS (the seed's model: the NIC writes them). */
static int spin_test(void) {
    int name[2] = {1, me};
    qx_hps_t *hps = qx_init(name, 1, 2);
    CHECK(hps != NULL, "qx_init");
    CHECK(qx_buffer_pool(32) == 0, "pool");
    unsigned char *pool = (unsigned char *)hps->buffer_pool;
    const long len = 65536;
    int r = -1, s = -1;
    if (me == 0) r = recv_post(1, 1, 9, len, 0);
    barrier(1, 2);
    if (me == 1) {
        int to[2] = {1, 0};
        fill(pool + 16 * QX_PAGE_SIZE, 1, 0, 9, len);
        s = qx_send_context(to, 9, 1, 16, len, 16, NULL);
        CHECK(s >= 0 && qx_send(s) == 0, "send");
    }
    int b = me == 0 ? spin(&hps->recv_doorbell[r]) : spin(&hps->send_doorbell[s]);
    if (b == QX_BUSY) {
        printf("spin: no progress in 5 s: process %d\n", me);
        return 1;
    }
    CHECK(b == QX_DONE, "doorbell %d", b);
    if (me == 0) {
        CHECK(qx_poll_for_receive(r) == len, "receive");
        CHECK(same(pool, 1, 0, 9, len), "data differs");
    } else {
        CHECK(qx_poll_for_send(s) == 0, "send done");
    }
    barrier(1, 2);
    CHECK(qx_end(name) == 0, "qx_end");
    printf("spin ok: process %d\n", me);
    return 0;
}

int main(int argc, char **argv) {
    me = env_int("VOLLEY_RANK", "PMI_RANK");
    n = env_int("VOLLEY_SIZE", "PMI_SIZE");
    if (me < 0) me = 0;
    if (n < 1) n = 1;
    if (argc > 1 && strcmp(argv[1], "apps") == 0) return apps();
    if (argc > 1 && strcmp(argv[1], "spin") == 0) return spin_test();
    if (argc > 1 && strcmp(argv[1], "alone") == 0) n = 2; /* more than the job has */
    const int AI = 1;
    int name[2] = {AI, me};
    qx_hps_t *hps = qx_init(name, AI, n);
    if (hps == NULL) {
        fprintf(stderr, "qx_init: %s\n", qx_strerror(qx_last_error()));
        return 1;
    }
    CHECK(n >= 5, "run with 5 processes");
    CHECK(hps->proc_name[1] == me && hps->group_size == n, "hps");
    CHECK(qx_buffer_pool(64) == 0 && hps->buffer_pool != NULL, "pool");
    CHECK(qx_buffer_pool(1) == QX_EEXIST, "second pool");
    CHECK(qx_buffer_pool(4096) == QX_EEXIST || qx_buffer_pool(4096) == QX_ETOOLONG, "pool limit");
    unsigned char *pool = (unsigned char *)hps->buffer_pool;

    /* A page table where the platform gives physical addresses. */
    long biglen = 6000 + me;
    unsigned char *big = malloc(3 * QX_PAGE_SIZE);
    unsigned long table[8];
    CHECK(qx_buffer_lock((char *)big, 3 * QX_PAGE_SIZE) == 0, "qx_buffer_lock");
    int pages = qx_buffer_translate((char *)big + 100, biglen, table);
    CHECK(pages > 0 || pages == QX_ENOPHYS, "qx_buffer_translate: %d", pages);
    if (pages > 0) {
        CHECK(QX_FIRST_PAGE_BYTES(table[pages]) + QX_LAST_PAGE_BYTES(table[pages]) +
                      (pages - 2) * QX_PAGE_SIZE == biglen,
              "trailer");
    }
    if (me == 0) printf("translate: %s\n", pages > 0 ? "physical addresses" : "not permitted");

    /* Long messages (tag 20) land in pool pages 2q..2q+1; posted before anything is sent. */
    int rlong[8], rshort[8];
    for (int q = 0; q < n; q++)
        if (q != me) rlong[q] = recv_post(AI, q, 20, 8192, 2 * q);

    /* Every process sends to every other: a short message (tag 10 + sender), then a long one. */
    int slong[8];
    for (int q = 0; q < n; q++) {
        if (q == me) continue;
        int to[2] = {AI, q};
        unsigned char msg[200];
        fill(msg, me, q, 10, 200);
        int s = qx_send_context(to, 10 + me, 0, 1, 200, -1, (unsigned long *)msg);
        CHECK(s >= 0 && qx_send_short(s) == 0, "send_short to %d", q);
        memset(msg, 0, sizeof msg); /* copied: reusable at once */
        if (pages > 0) {
            fill(big + 100, me, q, 20, biglen);
            slong[q] = qx_send_context(to, 20, 1, 2, biglen, -1, table);
        } else {
            fill(pool + 16 * QX_PAGE_SIZE, me, q, 20, biglen);
            slong[q] = qx_send_context(to, 20, 1, 2, biglen, 16, NULL);
        }
        CHECK(slong[q] >= 0 && qx_send(slong[q]) == 0, "send to %d", q);
        /* A long send's buffer is the data: wait before changing it for the next. */
        CHECK(qx_poll_for_send(slong[q]) == 0, "send to %d done", q);
    }
    barrier(AI, n);
    /* The short messages have arrived before their receives: they were kept. */
    for (int q = 0; q < n; q++)
        if (q != me) rshort[q] = recv_post(AI, q, 10 + q, 200, 12 + q);
    for (int q = 0; q < n; q++) {
        if (q == me) continue;
        CHECK(qx_poll_for_receive(rlong[q]) == 6000 + q, "long from %d", q);
        CHECK(same(pool + 2 * q * QX_PAGE_SIZE, q, me, 20, 6000 + q), "long from %d differs", q);
        CHECK(qx_poll_for_receive(rshort[q]) == 200, "short from %d", q);
        CHECK(same(pool + (12 + q) * QX_PAGE_SIZE, q, me, 10, 200), "short from %d differs", q);
    }

    /* Broadcast from 0 to the application (tag 30, 3000 bytes from the pool). */
    if (me == 0) {
        fill(pool + 20 * QX_PAGE_SIZE, 0, 99, 30, 3000);
        int s = qx_send_context(NULL, 30, 1, 1, 3000, 20, NULL);
        CHECK(qx_broadcast(s, AI) == 0 && qx_poll_for_send(s) == 0, "broadcast");
    } else {
        int r = recv_post(AI, 0, 30, 4096, 21);
        CHECK(qx_poll_for_receive(r) == 3000, "broadcast received");
        CHECK(same(pool + 21 * QX_PAGE_SIZE, 0, 99, 30, 3000), "broadcast differs");
    }
    /* Multicast_short from 1 to 2, 3 and 4 (tag 31). */
    if (me == 1) {
        int p2[2] = {AI, 2}, p3[2] = {AI, 3}, p4[2] = {AI, 4};
        int *list[3] = {p2, p3, p4};
        unsigned char msg[64];
        fill(msg, 1, 77, 31, 64);
        int s = qx_send_context(NULL, 31, 1, 1, 64, -1, (unsigned long *)msg);
        CHECK(qx_multicast_short(s, 3, list) == 0 && qx_poll_for_send(s) == 0, "multicast");
    } else if (me >= 2) {
        int r = recv_post(AI, 1, 31, 64, 22);
        CHECK(qx_poll_for_receive(r) == 64, "multicast received");
        CHECK(same(pool + 22 * QX_PAGE_SIZE, 1, 77, 31, 64), "multicast differs");
    }

    /* Short sends from 0 to each process, a short broadcast, short sends again, all
       with tag 32, 20 times: the broadcast may go another way (on shared memory,
       once through 0's board in NIC memory), yet each process matches 0's messages
       in the order 0 sent them. */
    for (int round = 0; round < 20; round++) {
        if (me == 0) {
            for (int k = 0; k < 3; k++) {
                unsigned char msg[64];
                fill(msg, 0, 3 * round + k, 32, 64);
                if (k == 1) {
                    int s = qx_send_context(NULL, 32, 1, 1, 64, -1, (unsigned long *)msg);
                    CHECK(qx_broadcast_short(s, AI) == 0 && qx_poll_for_send(s) == 0, "bcast");
                    continue;
                }
                for (int q = 1; q < n; q++) {
                    int to[2] = {AI, q};
                    int s = qx_send_context(to, 32, 1, 1, 64, -1, (unsigned long *)msg);
                    CHECK(qx_send_short(s) == 0 && qx_poll_for_send(s) == 0, "send %d", k);
                }
            }
        } else {
            int r[3];
            for (int k = 0; k < 3; k++) r[k] = recv_post(AI, 0, 32, 64, 23 + k);
            for (int k = 0; k < 3; k++) {
                CHECK(qx_poll_for_receive(r[k]) == 64, "round %d message %d", round, k);
                CHECK(same(pool + (23 + k) * QX_PAGE_SIZE, 0, 3 * round + k, 32, 64),
                      "round %d: message %d out of order", round, k);
            }
        }
    }

    /* Processes 1, 2 and 3 form group 50 and meet in its barrier three times. */
    if (me >= 1 && me <= 3) {
        int c = qx_send_context(NULL, 0, 1, 0, 0, -1, NULL);
        CHECK(qx_join_group(c, 50, 3) == 0 && qx_poll_for_send(c) == 0, "join_group");
        for (int k = 0; k < 3; k++) barrier(50, 3);
        /* A refused command gives its context back: a new one for each try. */
        int d = qx_send_context(NULL, 0, 1, 0, 0, -1, NULL);
        CHECK(qx_barrier(d, 50, 4) == QX_ESIZE, "wrong group size");
        CHECK(qx_poll_for_send(d) == QX_ENOCTX, "the refused barrier's context is free");
        d = qx_send_context(NULL, 0, 1, 0, 0, -1, NULL);
        CHECK(qx_barrier(d, 51, 3) == QX_EUNKNOWN, "unknown group");
        d = qx_send_context(NULL, 0, 1, 0, 0, -1, NULL);
        CHECK(qx_poll_for_send(d) == QX_EINVAL, "nothing posted");
    }
    barrier(AI, n);

    /* Long messages around the ring (tag 40, 40000 bytes, pool pages 32.. to 48..):
       the library sends them by rendezvous, straight into a receive posted before
       the request (even processes), or as packets kept until the receive is posted
       (odd processes post theirs only once their own send is done). */
    {
        const long len = 40000;
        int prev = (me + n - 1) % n, next_p[2] = {AI, (me + 1) % n};
        int r = -1;
        if (me % 2 == 0) r = recv_post(AI, prev, 40, len, 48);
        barrier(AI, n);
        fill(pool + 32 * QX_PAGE_SIZE, me, (me + 1) % n, 40, len);
        int s = qx_send_context(next_p, 40, 1, 10, len, 32, NULL);
        CHECK(s >= 0 && qx_send(s) == 0, "long send around the ring");
        CHECK(qx_poll_for_send(s) == 0, "long send done");
        if (me % 2 == 1) r = recv_post(AI, prev, 40, len, 48);
        CHECK(qx_poll_for_receive(r) == len, "long receive around the ring");
        CHECK(same(pool + 48 * QX_PAGE_SIZE, prev, me, 40, len), "long message differs");
        barrier(AI, n);
    }

    /* Misuse is a negative number with a name. */
    CHECK(qx_send(63) == QX_ENOCTX, "unused context");
    CHECK(qx_poll_for_receive(-5) == QX_ENOCTX, "negative context");
    int nobody[2] = {AI, 40};
    int bad = qx_send_context(nobody, 1, 1, 1, 4, 0, NULL);
    CHECK(qx_send(bad) == QX_EUNKNOWN, "unknown process");
    /* No application AI + 1 runs: its names are unknown, not another
       application's. */
    int far[2] = {AI + 1, 0};
    int bad2 = qx_send_context(far, 1, 1, 1, 4, 0, NULL);
    CHECK(qx_send(bad2) == QX_EUNKNOWN, "an application that does not exist");
    int next[2] = {AI, (me + 1) % n};
    int big_short = qx_send_context(next, 1, 1, 1, QX_SHORT_MAX + 1, 0, NULL);
    CHECK(qx_send_short(big_short) == QX_ETOOLONG, "short too long");
    if (pages > 0) {
        /* A page table naming a frame this process never translated, or whose
           trailer does not fit its length, reaches nothing. */
        unsigned long forged[8];
        memcpy(forged, table, sizeof forged);
        forged[0] = 0x1000 + (table[0] & 0xfff);
        int f = qx_send_context(next, 1, 1, 2, biglen, -1, forged);
        CHECK(qx_send(f) == QX_EFAULT, "forged frame");
        int g = qx_send_context(next, 1, 1, 2, biglen - 1, -1, table);
        CHECK(qx_send(g) == QX_EINVAL, "trailer of another length");
    }
    /* A refused command gives its context back: 100 rounds of refusals, more than
       either context list holds, then a send and a receive around the ring. */
    for (int k = 0; k < 100; k++) {
        int c = qx_send_context(nobody, 1, 1, 1, 4, 0, NULL);
        CHECK(c >= 0 && qx_send(c) == QX_EUNKNOWN, "refused send %d", k);
        c = qx_send_context(next, 1, 1, 1, QX_SHORT_MAX + 1, 0, NULL);
        CHECK(c >= 0 && qx_send_short(c) == QX_ETOOLONG, "refused short send %d", k);
        c = qx_recv_context(far, 1, 1, 1, 4, 0, NULL);
        CHECK(c >= 0 && qx_receive(c) == QX_EUNKNOWN, "refused receive %d", k);
    }
    int prev2 = (me + n - 1) % n;
    int r2 = recv_post(AI, prev2, 41, 8, 0);
    static char word[8] = "refused";
    int s2 = qx_send_context(next, 41, 1, 1, 8, -1, (unsigned long *)word);
    CHECK(s2 >= 0 && qx_send_short(s2) == 0 && qx_poll_for_send(s2) == 0,
          "a send after the refusals");
    CHECK(qx_poll_for_receive(r2) == 8 && strcmp(hps->buffer_pool, "refused") == 0,
          "a receive after the refusals");
    CHECK(strlen(qx_strerror(QX_EDEAD)) > 0, "strerror");
    CHECK(qx_end(nobody) == QX_EINVAL, "qx_end with another name");
    CHECK(qx_end(name) == 0, "qx_end");
    CHECK(qx_send(0) == QX_ENOTINIT, "after qx_end");
    printf("qnix ok: process %d of %d\n", me, n);
    return 0;
}
