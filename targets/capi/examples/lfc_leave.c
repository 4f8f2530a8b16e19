/* Processes that leave early: with 4 or more processes, all but 0 and 1 call
 * lfc_exit() right after lfc_start() (they have nothing to do, as in the guide's
 * latency program run on more processes) and return 0, while 0 and 1 ping-pong
 * for two seconds: long enough for the others' silence to be probed. A process
 * that left is not a process that died: 0 and 1 carry on and exit 0. With
 * argv[1] "send_to_left", process 0 then launches a packet to process 2, which
 * must stop it with one line naming the call. Prints "lfc_leave ok: ...". */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <lfc.h>

static volatile unsigned got;
static volatile int last_more = 1;

int lfc_upcall(unsigned src, void *packet, unsigned size, lfc_upcall_flags_t flags)
{
    (void)src; (void)size; (void)flags;
    /* The first byte of process 0's packets: whether another round follows. */
    last_more = ((char *)packet)[0];
    got++;
    return 0;
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void send_byte(unsigned to, char b)
{
    char *p = lfc_send_alloc(1);
    p[0] = b;
    lfc_ucast_launch(to, p, 8, 1);
}

int main(int argc, char **argv)
{
    lfc_init(&argc, argv);
    const char *mode = argc > 1 ? argv[1] : "";
    lfc_start();
    unsigned me = lfc_my_proc(), n = lfc_nr_procs();
    if (n < 4) {
        printf("lfc_leave: needs 4 processes or more\n");
        lfc_exit();
        return 1;
    }
    if (me >= 2) {
        lfc_exit();
        return 0;
    }
    unsigned peer = 1 - me, rounds = 0;
    double end = now() + 2.0;
    for (;;) {
        if (me == 0) {
            char more = now() < end;
            send_byte(peer, more);
            while (got == rounds) lfc_poll();
            rounds++;
            if (!more) break;
        } else {
            while (got == rounds) lfc_poll();
            rounds++;
            send_byte(peer, 1);
            if (!last_more) break;
        }
    }
    if (me == 0 && strcmp(mode, "send_to_left") == 0) {
        send_byte(2, 1);
        printf("lfc_leave: a packet to a process that left was taken\n");
        return 1;
    }
    printf("lfc_leave ok: process %u, %u rounds\n", me, rounds);
    lfc_exit();
    return 0;
}
