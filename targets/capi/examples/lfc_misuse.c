/* Misuse of the LFC API, one case per run (the case is argv[1]): each must stop
 * the process with one line naming the call and exit status 1 (LFC's calls return
 * nothing, so there is no error to return), or, for the cases the guide allows,
 * go on. Cases: before_init, group_after_start, bogus_launch, too_big, bad_dest,
 * bad_group, neg_group, launch_twice, bogus_free, null_free, free_twice,
 * exit_in_upcall; allowed: self_dest (a packet to oneself), extra_enable (more
 * enables than disables). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lfc.h>
static void *kept;
static int upcalls;
static const char *mode = "";
int lfc_upcall(unsigned src, void *packet, unsigned size, lfc_upcall_flags_t flags)
{
    (void)src; (void)size; (void)flags;
    if (strcmp(mode, "exit_in_upcall") == 0) lfc_exit();
    kept = packet;
    upcalls++;
    return 1;
}
int main(int argc, char **argv)
{
    static char not_packet[64];
    if (argc > 1 && strcmp(argv[1], "before_init") == 0) { lfc_poll(); return 0; }
    lfc_init(&argc, argv);
    mode = argc > 1 ? argv[1] : "";
    if (strcmp(mode, "group_after_start") != 0) {
        unsigned all[2] = {0, 1};
        (void)lfc_group_create(all, 2);
    }
    lfc_start();
    unsigned me = lfc_my_proc(), peer = 1 - me;
    if (strcmp(mode, "group_after_start") == 0) { unsigned all[2] = {0, 1}; (void)lfc_group_create(all, 2); }
    void *p = lfc_send_alloc(1);
    if (strcmp(mode, "bogus_launch") == 0) lfc_ucast_launch(peer, not_packet, 8, 1);
    if (strcmp(mode, "too_big") == 0) lfc_ucast_launch(peer, p, lfc_packet_size() + 1, 1);
    if (strcmp(mode, "bad_dest") == 0) lfc_ucast_launch(99, p, 8, 1);
    if (strcmp(mode, "bad_group") == 0) lfc_mcast_launch(42, p, 8, 1);
    if (strcmp(mode, "neg_group") == 0) lfc_mcast_launch(-3, p, 8, 1);
    if (strcmp(mode, "launch_twice") == 0) { lfc_ucast_launch(peer, p, 8, 1); lfc_ucast_launch(peer, p, 8, 1); }
    if (strcmp(mode, "bogus_free") == 0) lfc_packet_free((void *)0x1234);
    if (strcmp(mode, "null_free") == 0) lfc_packet_free(NULL);
    if (strcmp(mode, "self_dest") == 0) { lfc_ucast_launch(me, p, 8, 1); p = lfc_send_alloc(1); }
    lfc_ucast_launch(peer, p, 8, 1);
    /* With a packet to itself, the peer's is the second: waiting for it keeps
     * this process from leaving before the peer's launch to it. */
    while (upcalls < (strcmp(mode, "self_dest") == 0 ? 2 : 1)) lfc_poll();
    if (strcmp(mode, "free_twice") == 0) { lfc_packet_free(kept); lfc_packet_free(kept); }
    if (strcmp(mode, "extra_enable") == 0) { lfc_intr_enable(); lfc_intr_enable(); lfc_intr_disable(); }
    printf("rank %u: %s went on\n", me, mode);
    lfc_exit();
    return 0;
}
