/* One-sided means one-sided: context 1 tells context 0 where its buffer and its
 * flag are, then computes without calling Cheetah at all until the flag is set.
 * Context 0 meanwhile puts 1 MiB into the buffer in 16 pieces, gets it back and
 * compares, then puts the flag. Where puts and gets need the target's polls, this
 * never ends; on one host they must complete without them. Then context 1 checks
 * the data and waits (polling now) for the 16 remote bells. */
#define _XOPEN_SOURCE 500
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <cheetah_core.h>

#define LEN (1 << 20)
#define PIECES 16

static unsigned char buf[LEN];
static volatile int go;
static int remote_bell, addr_bell;
static void *target[3];
static volatile int known;

static void on_addr(int who, int tag, void *b, int len)
{
    (void)who; (void)tag; (void)len;
    memcpy(target, b, sizeof target);
    known = 1;
}

static unsigned char byte(int i) { return (unsigned char)(i * 131 + (i >> 9)); }

int main(int argc, char **argv)
{
    int i, bell = 0, one = 1;
    unsigned long spins = 0;
    cheetah_core_setup(&argc, &argv);
    cheetah_core_register(1, on_addr);
    cheetah_core_barrier();
    if (cheetah_core_mycontext() == 1) {
        void *a[3];
        a[0] = buf; a[1] = (void *)&go; a[2] = &remote_bell;
        cheetah_core_ainvoke(0, 1, a, sizeof a, &addr_bell);
        /* The ainvoke's packets are handed to the fabric before it returns; from
         * here on no Cheetah call until context 0 sets the flag. */
        while (!go) { spins++; if (spins % 1024 == 0) sched_yield(); }
        for (i = 0; i < LEN; i++)
            if (buf[i] != byte(i)) { printf("byte %d differs\n", i); return 1; }
        printf("data in place before any poll\n");
        cheetah_core_wait(&remote_bell, PIECES);
        printf("remote bells rung: %d\n", remote_bell);
    } else if (cheetah_core_mycontext() == 0) {
        unsigned char *src = malloc(LEN), *back = malloc(LEN);
        if (!src || !back) return 2;
        for (i = 0; i < LEN; i++) src[i] = byte(i);
        memset(back, 0, LEN);
        while (!known) cheetah_core_poll();
        for (i = 0; i < PIECES; i++)
            cheetah_core_put(1, (char *)target[0] + i * (LEN / PIECES), src + i * (LEN / PIECES),
                             LEN / PIECES, &bell, (int *)target[2]);
        cheetah_core_wait(&bell, PIECES);
        cheetah_core_get(1, target[0], back, LEN, &bell, NULL);
        cheetah_core_wait(&bell, PIECES + 1);
        if (memcmp(src, back, LEN) != 0) { printf("get differs\n"); return 1; }
        printf("16 puts and a get done while context 1 never polled\n");
        cheetah_core_put(1, target[1], &one, sizeof one, NULL, NULL);
        free(src); free(back);
    }
    cheetah_core_finalize();
    printf("done\n");
    return 0;
}
