/*
 * A ring exchange and a reduce in the style of OpenFOAM's GAMMA Pstream, on the
 * later API (<linux/gamma/libgamma.h>): port p receives from instance p into two
 * buffers in GO_BACK mode; the handler records gamma_msglen and re-arms the next
 * buffer with gamma_post_recv while the program still reads the other.
 *
 *   cc ring.c $(pkg-config --cflags --libs volley) -o ring
 *   volley run -n 4 -- ./ring
 */
#include <linux/gamma/libgamma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAXN 64
#define NBUF 2
#define BUFLEN 8192
#define ROUNDS 60

static char bufs[MAXN][NBUF][BUFLEN];
static long lens[MAXN][NBUF];
static int recv_index[MAXN], consume_index[MAXN];

static void handler(void)
{
    unsigned short p = gamma_active_port;
    int cur = recv_index[p], next = (cur + 1) % NBUF;
    if (lens[p][cur] != -1 || gamma_msglen < 0 || gamma_msglen > BUFLEN) {
        fprintf(stderr, "ring: buffer %d of port %u not consumed, or bad length %ld\n", cur,
                p, gamma_msglen);
        gamma_abort();
    }
    lens[p][cur] = gamma_msglen;
    recv_index[p] = next;
    gamma_post_recv(p, bufs[p][next], BUFLEN);
}

/* Waits for the next message from `p` and copies it out; returns its length. */
static long take(int p, void *dst)
{
    int c, rc;
    long len;
    if ((rc = gamma_wait(p, 1)) != 0) {
        fprintf(stderr, "ring: gamma_wait(%d) = %d\n", p, rc);
        exit(1);
    }
    c = consume_index[p];
    len = lens[p][c];
    memcpy(dst, bufs[p][c], (size_t)len);
    lens[p][c] = -1;
    consume_index[p] = (c + 1) % NBUF;
    return len;
}

static void put(int p, const void *src, unsigned long len)
{
    int rc = gamma_send_flowctl(p, (void *)src, len);
    if (rc != (int)len) {
        fprintf(stderr, "ring: gamma_send_flowctl(%d) = %d\n", p, rc);
        exit(1);
    }
}

static char byte_of(int from, int round, long i)
{
    return (char)(from * 37 + round * 11 + i);
}

int main(int argc, char **argv)
{
    static char msg[BUFLEN], in[BUFLEN];
    int me, n, p, round, left, right;
    long i, len;
    double value, sum;

    gamma_init(0, argc, argv);
    me = gamma_my_node();
    n = gamma_how_many_nodes();
    if (n < 2 || n > MAXN) {
        fprintf(stderr, "ring: 2 to %d processes\n", MAXN);
        return 2;
    }
    for (p = 0; p < n; p++) {
        lens[p][0] = lens[p][1] = -1;
        if (p != me &&
            gamma_set_active_port(p, p, gamma_my_par_pid(), me, handler, p, GO_BACK,
                                  bufs[p][0], BUFLEN) < 0) {
            fprintf(stderr, "ring: gamma_set_active_port(%d) failed\n", p);
            return 1;
        }
    }
    gamma_sync();

    left = (me + n - 1) % n;
    right = (me + 1) % n;
    for (round = 0; round < ROUNDS; round++) {
        len = 16 + (round * 997) % (BUFLEN - 16);
        for (i = 0; i < len; i++)
            msg[i] = byte_of(me, round, i);
        put(right, msg, (unsigned long)len);
        /* Every other round, a second message before the first is read: both
         * receive buffers are in use. */
        if (round % 2)
            put(right, msg, (unsigned long)len);
        if (take(left, in) != len || (round % 2 && take(left, in) != len)) {
            fprintf(stderr, "ring: round %d: wrong length\n", round);
            return 1;
        }
        for (i = 0; i < len; i++)
            if (in[i] != byte_of(left, round, i)) {
                fprintf(stderr, "ring: round %d: byte %ld wrong\n", round, i);
                return 1;
            }
        /* GAMMA has no flow control at the level of the program's buffers: two
         * buffers hold at most two messages, so no sender may run a round ahead. */
        gamma_sync();
    }

    /* Reduce to instance 0, then broadcast the sum back. */
    value = 1.5 * (me + 1);
    if (me == 0) {
        sum = value;
        for (p = 1; p < n; p++) {
            take(p, &value);
            sum += value;
        }
        for (p = 1; p < n; p++)
            put(p, &sum, sizeof sum);
    } else {
        put(0, &value, sizeof value);
        take(0, &sum);
    }
    if (sum != 1.5 * n * (n + 1) / 2) {
        fprintf(stderr, "ring: sum %g is wrong\n", sum);
        return 1;
    }
    gamma_sync();
    printf("ring ok: instance %d of %d, %d rounds, sum %g\n", me, n, ROUNDS, sum);
    return gamma_exit() < 0;
}
