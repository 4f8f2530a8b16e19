/* Cheetah core: addresses exchanged by ainvoke, a put ring with both bells, a
 * 16 MiB get in pieces with content checks, an ainvoke ping-pong, a handler that
 * itself puts, wait, barrier and finalize. Run with -np N (or under a launcher).
 * With the argument "nodump" every context makes itself non-dumpable first, so
 * that (without CAP_SYS_PTRACE) no other process may copy into or out of it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <cheetah_core.h>

#define RING_LEN 100000
#define BIG (16 * 1024 * 1024)
#define PIECE (1024 * 1024)
#define ROUNDS 200

enum { TAG_ADDR = 1, TAG_PING, TAG_PONG, TAG_PUTME };

struct addrs { char *ring_in; char *big; int *ring_bell; int *got_bell; char *reply; int *reply_bell; };

static struct addrs peer[64];
static int addrs_known;
static char ring_out[RING_LEN], ring_in[RING_LEN];
static char big[BIG], fetched[BIG];
static char reply[4096];
static int ring_bell, got_bell, reply_bell, pongs;

static unsigned char pat(int ctx, long i) { return (unsigned char)(ctx * 131 + i * 7 + (i >> 9)); }

static void on_addr(int who, int tag, void *buf, int len)
{
    (void)tag;
    if (len != (int)sizeof(struct addrs)) { fprintf(stderr, "bad addr len %d\n", len); exit(3); }
    memcpy(&peer[who], buf, sizeof(struct addrs));
    addrs_known++;
}

static void on_ping(int who, int tag, void *buf, int len)
{
    (void)tag;
    cheetah_core_ainvoke(who, TAG_PONG, buf, len, NULL);
}

static void on_pong(int who, int tag, void *buf, int len)
{
    (void)who; (void)tag;
    if (len != 4 || *(int *)buf != pongs) { fprintf(stderr, "pong %d out of order\n", pongs); exit(3); }
    pongs++;
}

/* The handler itself puts: 4096 bytes of our big buffer into the invoker's reply. */
static void on_putme(int who, int tag, void *buf, int len)
{
    (void)tag; (void)buf; (void)len;
    cheetah_core_put(who, peer[who].reply, big, sizeof reply, NULL, peer[who].reply_bell);
}

int main(int argc, char **argv)
{
    int me, n, next, prev, i, bell = 0, k;
    struct addrs mine;
    cheetah_core_setup(&argc, &argv);
    if (argc > 1 && strcmp(argv[1], "nodump") == 0 && prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
        perror("prctl");
        return 2;
    }
    me = cheetah_core_mycontext();
    n = cheetah_core_ncontexts();
    if (n < 2 || n > 64) { fprintf(stderr, "need 2..64 contexts, have %d\n", n); return 2; }
    next = (me + 1) % n;
    prev = (me + n - 1) % n;
    cheetah_core_register(TAG_ADDR, on_addr);
    cheetah_core_register(TAG_PING, on_ping);
    cheetah_core_register(TAG_PONG, on_pong);
    cheetah_core_register(TAG_PUTME, on_putme);
    for (i = 0; i < RING_LEN; i++) ring_out[i] = (char)pat(me, i);
    for (i = 0; i < BIG; i++) big[i] = (char)pat(me + 7, i);

    /* Addresses differ between processes (ASLR): tell every other context ours. */
    mine.ring_in = ring_in; mine.big = big; mine.ring_bell = &ring_bell;
    mine.got_bell = &got_bell; mine.reply = reply; mine.reply_bell = &reply_bell;
    for (i = 0; i < n; i++)
        if (i != me) cheetah_core_ainvoke(i, TAG_ADDR, &mine, sizeof mine, &bell);
    cheetah_core_wait(&bell, n - 1);
    while (addrs_known < n - 1) cheetah_core_poll();
    cheetah_core_barrier();

    /* Put ring: local bell when ring_out may be reused, remote bell at next. */
    bell = 0;
    cheetah_core_put(next, peer[next].ring_in, ring_out, RING_LEN, &bell, peer[next].ring_bell);
    cheetah_core_wait(&bell, 1);
    cheetah_core_wait(&ring_bell, 1);
    for (i = 0; i < RING_LEN; i++)
        if ((unsigned char)ring_in[i] != pat(prev, i)) { fprintf(stderr, "ring byte %d\n", i); return 1; }
    printf("context %d of %d: put ring ok\n", me, n);

    /* 16 MiB get from next in 1 MiB pieces; next's got_bell rings per piece. */
    bell = 0;
    for (k = 0; k < BIG / PIECE; k++)
        cheetah_core_get(next, peer[next].big + (long)k * PIECE, fetched + (long)k * PIECE, PIECE,
                         &bell, peer[next].got_bell);
    cheetah_core_wait(&bell, BIG / PIECE);
    for (i = 0; i < BIG; i++)
        if ((unsigned char)fetched[i] != pat(next + 7, i)) { fprintf(stderr, "get byte %d\n", i); return 1; }
    cheetah_core_wait(&got_bell, BIG / PIECE);
    printf("context %d: get 16 MiB ok\n", me);
    cheetah_core_barrier();

    /* Ping-pong between 0 and 1; then a handler that puts. */
    if (me == 0) {
        for (i = 0; i < ROUNDS; i++) {
            cheetah_core_ainvoke(1, TAG_PING, &i, sizeof i, NULL);
            while (pongs <= i) cheetah_core_poll();
        }
        cheetah_core_ainvoke(1, TAG_PUTME, NULL, 0, NULL);
        cheetah_core_wait(&reply_bell, 1);
        for (i = 0; i < (int)sizeof reply; i++)
            if ((unsigned char)reply[i] != pat(1 + 7, i)) { fprintf(stderr, "reply byte %d\n", i); return 1; }
        printf("context 0: %d ping-pongs, handler put ok\n", ROUNDS);
    }
    cheetah_core_barrier();
    cheetah_core_finalize();
    printf("context %d: done\n", me);
    return 0;
}
