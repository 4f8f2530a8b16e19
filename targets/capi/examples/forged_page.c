/*
 * forged_page.c: a test helper, not an API example. Run by another user, it
 * publishes a page named like a Volley process's direct-copy page (job ARGV[1],
 * node ARGV[2]) with a table that is valid in form, then waits ARGV[3] seconds.
 * A Volley process must never take it for its peer: puts to it would hand this
 * user the data.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct table {
    uint64_t magic, job;
    uint32_t pid, node, mode, count;
    uint64_t ranges[64][2];
};

int main(int argc, char **argv) {
    if (argc != 4) {
        fprintf(stderr, "usage: forged_page JOB NODE SECONDS\n");
        return 2;
    }
    uint64_t job = strtoull(argv[1], NULL, 0);
    unsigned node = (unsigned)strtoul(argv[2], NULL, 0);
    static struct table t;
    memcpy(&t.magic, "VLYEXPOS", 8);
    t.job = job;
    t.pid = (uint32_t)getpid();
    t.node = node;
    char name[64];
    snprintf(name, sizeof name, "volley-expos-%016llx-%u", (unsigned long long)job, node);
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0 || ftruncate(fd, 4096) != 0) {
        perror("memfd");
        return 1;
    }
    uint64_t *w = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (w == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    w[0] = (uint64_t)(uintptr_t)&t;
    w[1] = 2;
    printf("forged page %s ready\n", name);
    fflush(stdout);
    sleep((unsigned)atoi(argv[3]));
    return 0;
}
