/*
 * LFC multicast, broadcast, kept packets and fetch-and-add, checked.
 *
 * Every process broadcasts ROUNDS packets and multicasts ROUNDS more to the group
 * of odd ranks; the upcall keeps multicast packets (up to KEEP_MAX at once, on a list
 * in the LFC heap) and the main loop frees them later. Every process then takes
 * FA values from process 0's fetch-and-add variable, all at once, and sends them to
 * process 0, which checks that every value from 0 to nprocs*FA-1 came exactly once.
 * Prints "lfc_groups ok" on process 0; any mistake exits 1 with a message.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <lfc.h>

#define ROUNDS 200
#define FA 50
/* Packets kept at once. A kept packet holds one of the process's receive packets
 * (LFC lends them; 256 here): a program that keeps without bound while it blocks in
 * lfc_send_alloc (which runs upcalls, never the main loop's frees) fills them, its
 * senders' packets are refused, their send packets never free, and every process
 * waits for another. Past the bound the upcall copies what it needs and lets go. */
#define KEEP_MAX 32
#define TAG_BCAST 1
#define TAG_MCAST 2
#define TAG_VALUE 3

struct msg { unsigned tag, from, seq, value; };

static volatile unsigned got_bcast, got_mcast, got_values;
static unsigned *next_seq;     /* per source and tag: the next sequence number */
static unsigned *seen;         /* process 0: fetch-and-add values seen */
static void **kept;            /* packets kept by the upcall */
static unsigned nkept, cap_kept;
static int odd_gid;

static void fail(const char *what, unsigned a, unsigned b)
{
    fprintf(stderr, "lfc_groups: process %u: %s (%u, %u)\n", lfc_my_proc(), what, a, b);
    exit(1);
}

int lfc_upcall(unsigned src, void *packet, unsigned size, lfc_upcall_flags_t flags)
{
    struct msg m;
    if (size != sizeof m) fail("bad size", size, src);
    memcpy(&m, packet, sizeof m);
    if (m.from != src) fail("source", m.from, src);
    switch (m.tag) {
    case TAG_BCAST:
    case TAG_MCAST: {
        unsigned *n = &next_seq[2 * src + (m.tag - 1)];
        if (!(flags & LFC_UPCALL_MCAST)) fail("no LFC_UPCALL_MCAST", m.tag, src);
        if (m.seq != *n) fail("out of order or twice", m.seq, *n);
        (*n)++;
        if (m.tag == TAG_BCAST) { got_bcast++; return 0; }
        if (lfc_my_proc() % 2 == 0) fail("multicast reached an even process", src, m.seq);
        got_mcast++;
        if (nkept == KEEP_MAX) return 0;
        if (nkept == cap_kept) {
            cap_kept = cap_kept ? 2 * cap_kept : 4;
            kept = lfc_realloc(kept, cap_kept * sizeof *kept);
            if (!kept) fail("lfc_realloc", cap_kept, 0);
        }
        kept[nkept++] = packet;
        return 1; /* kept: freed by the main loop */
    }
    case TAG_VALUE:
        if (flags & LFC_UPCALL_MCAST) fail("unicast flagged multicast", src, m.value);
        if (lfc_my_proc() != 0 || m.value >= lfc_nr_procs() * FA) fail("value", m.value, src);
        if (seen[m.value]++) fail("fetch-and-add value twice", m.value, src);
        got_values++;
        return 0;
    }
    fail("tag", m.tag, src);
    return 0;
}

static void send_msg(int gid, unsigned dest, unsigned tag, unsigned seq, unsigned value)
{
    struct msg m = { tag, lfc_my_proc(), seq, value };
    void *p = lfc_send_alloc(1);
    lfc_memcpy(p, &m, sizeof m);
    if (tag == TAG_BCAST) lfc_bcast_launch(p, sizeof m, 1);
    else if (tag == TAG_MCAST) lfc_mcast_launch(gid, p, sizeof m, 1);
    else lfc_ucast_launch(dest, p, sizeof m, 1);
}

static void free_some(void)
{
    while (nkept > 0) lfc_packet_free(kept[--nkept]);
}

int main(int argc, char **argv)
{
    unsigned me, n, i, odd = 0, *members, want_mcast, polls = 0;
    unsigned values[FA];

    lfc_init(&argc, argv);
    n = lfc_nr_procs();
    members = lfc_malloc(n * sizeof *members);
    for (i = 1; i < n; i += 2) members[odd++] = i;
    odd_gid = odd ? lfc_group_create(members, odd) : -1;
    lfc_free(members);
    next_seq = lfc_calloc(2 * n, sizeof *next_seq);
    lfc_start();
    me = lfc_my_proc();
    if (lfc_intr_status()) fail("interrupts enabled after lfc_start", 0, 0);
    if (me == 0) seen = lfc_calloc(n * FA, sizeof *seen);

    for (i = 0; i < ROUNDS; i++) {
        send_msg(0, 0, TAG_BCAST, i, 0);
        if (odd_gid >= 0) send_msg(odd_gid, 0, TAG_MCAST, i, 0);
        if (i % 16 == 0) { lfc_poll(); free_some(); }
    }
    /* Multicasts to the odd group come from every process but oneself. */
    want_mcast = me % 2 ? ROUNDS * (n - 1) : 0;
    while (got_bcast < ROUNDS * (n - 1) || got_mcast < want_mcast) {
        lfc_poll();
        /* Kept packets stay kept across a poll, then go back. */
        if (++polls % 2 == 0) free_some();
    }
    free_some();

    for (i = 0; i < FA; i++) values[i] = lfc_fetch_and_add(0, 1);
    for (i = 0; i < FA; i++) {
        if (me == 0) {
            if (values[i] >= n * FA || seen[values[i]]++) fail("own value", values[i], i);
            got_values++;
        } else {
            send_msg(0, 0, TAG_VALUE, i, values[i]);
        }
    }
    if (me == 0) {
        int buf;
        while (got_values < n * FA) lfc_poll();
        for (i = 0; i < n * FA; i++)
            if (seen[i] != 1) fail("fetch-and-add value missing", i, seen[i]);
        buf = lfc_stats_create();
        lfc_stats_gather(buf);
        lfc_stats_dump(stdout, buf, "lfc statistics", NULL);
        printf("lfc_groups ok: %u processes, %u broadcasts and %u multicasts each, %u distinct fetch-and-add values\n",
               n, ROUNDS, ROUNDS, n * FA);
    } else {
        int buf = lfc_stats_create();
        lfc_stats_gather(buf);
    }
    lfc_exit();
    return 0;
}
