/* Context 0 puts (or gets) where context 1 never let it: into a range context 1
 * did not expose ("hidden"), into its code ("text"), or where nothing is mapped
 * ("unmapped"). Context 0 must die with one line; context 1 must be unharmed.
 * "nullinvoke": context 0 invokes a handler with a NULL buffer of 8 bytes, which
 * must be one line too, never an empty invocation. "imagetag" (a job of one):
 * the context registers ("put") or invokes ("get") the library's own tag
 * (INT_MIN), which must be one line. */
#define _XOPEN_SOURCE 500
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cheetah_core.h>

static char open_buf[64];
static char secret[64] = "the target's secret, never to be overwritten";
static int open_bell, addr_bell;
static char *target[3];
static int known;

static void on_addr(int who, int tag, void *buf, int len)
{
    (void)who; (void)tag; (void)len;
    memcpy(target, buf, sizeof target);
    known = 1;
}

int main(int argc, char **argv)
{
    const char *mode;
    char junk[64];
    int bell = 0;
    cheetah_core_setup(&argc, &argv);
    mode = argc > 2 ? argv[2] : "hidden";
    if (strcmp(mode, "nullinvoke") == 0) {
        if (cheetah_core_mycontext() == 0)
            cheetah_core_ainvoke(1, 1, NULL, 8, NULL);
        printf("context %d: null invocation passed\n", cheetah_core_mycontext());
        return 0;
    }
    if (strcmp(mode, "imagetag") == 0) {
        if (argc > 1 && strcmp(argv[1], "get") == 0) {
            memset(junk, 0, sizeof junk);
            cheetah_core_ainvoke(0, INT_MIN, junk, 8, NULL);
        } else
            cheetah_core_register(INT_MIN, on_addr);
        printf("context %d: the library's tag was taken\n", cheetah_core_mycontext());
        return 0;
    }
    cheetah_core_register(1, on_addr);
    if (cheetah_core_mycontext() == 1) {
        char *a[3];
        if (strcmp(mode, "hidden") == 0
            && (cheetah_core_expose(open_buf, sizeof open_buf) != 0
                || cheetah_core_expose(&open_bell, sizeof open_bell) != 0)) {
            fprintf(stderr, "expose failed\n");
            return 2;
        }
        a[0] = open_buf;
        a[1] = strcmp(mode, "text") == 0 ? (char *)(void *)main
             : strcmp(mode, "unmapped") == 0 ? (char *)16 : secret;
        a[2] = (char *)&open_bell;
        cheetah_core_ainvoke(0, 1, a, sizeof a, &addr_bell);
        cheetah_core_wait(&open_bell, 1);
        /* Serve whatever comes for a while; the bad put must change nothing. */
        {
            int i;
            for (i = 0; i < 2000; i++) { cheetah_core_poll(); usleep(1000); }
        }
        if (strcmp(secret, "the target's secret, never to be overwritten") != 0 || open_bell != 1) {
            printf("target harmed\n");
            return 1;
        }
        printf("target unharmed: %s\n", open_buf);
        return 0;
    }
    while (!known) cheetah_core_poll();
    memset(junk, 'X', sizeof junk);
    strcpy(junk, "allowed");
    cheetah_core_put(1, target[0], junk, 8, &bell, (int *)target[2]);
    cheetah_core_wait(&bell, 1);
    printf("allowed put done\n");
    fflush(stdout);
    if (argc > 1 && strcmp(argv[1], "get") == 0)
        cheetah_core_get(1, target[1], junk, 16, &bell, NULL);
    else
        cheetah_core_put(1, target[1], junk, 16, &bell, NULL);
    cheetah_core_wait(&bell, 2);
    printf("hostile operation completed\n");
    return 0;
}
