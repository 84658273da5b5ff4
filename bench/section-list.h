/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* section-list.h: the sections of redislock-bench, in the order they run.
 *
 * One line per section: the name `--only` and `--list` know it by, the title printed
 * above its figures, its function, defined in section-NAME.c and declared in bench.h,
 * and for a section that starts other processes, what they run (`--child=NAME`). The run, `--list` and the section names in `--help` all read this table, so
 * adding a section is a file, a line here, a prototype in bench.h and a line in
 * Makefile.am. Included by redislock-bench.c only.
 */
#ifndef REDIS_LOCK_BENCH_SECTION_LIST_H
#define REDIS_LOCK_BENCH_SECTION_LIST_H

#include "bench.h"

/* The sections of section-cluster.c, each on a private Redis Cluster. */
void section_cluster_uncontended (Bench *b, Section *s);
void section_cluster_watchdog (Bench *b, Section *s);
/* section-cluster-notify.c: unlock notifications on a private Redis Cluster. */
void section_cluster_notify (Bench *b, Section *s);
/* section-fencing.c: fencing tokens and several locks at once. */
void section_fencing (Bench *b, Section *s);
/* section-tls.c: lock+unlock over rediss://, on a private TLS server. */
void section_tls (Bench *b, Section *s);
/* section-quorum.c: a quorum registry on 3 private servers against one of them alone. */
void section_quorum (Bench *b, Section *s);

typedef struct
{
  const char *name;
  const char *title;
  SectionFunc func;
  ChildFunc child; /* what `--child=NAME` runs, for a section with other processes */
} SectionEntry;

static const SectionEntry section_table[] = {
  { "raw", "Raw limit: EVALSHA of `return 1` on plain hiredis connections", section_raw, NULL },
  { "reentrant", "Re-entrant lock+unlock, the lock held once outside the loop", section_reentrant,
    NULL },
  { "uncontended", "Uncontended outermost lock+unlock", section_uncontended, NULL },
  { "semaphore", "semaphore acquire+release vs two raw round trips", section_semaphore, NULL },
  { "handoff", "Cross-process hand-off, PUBSUB wait (the default)", section_handoff,
    handoff_child },
  { "handoff-spin", "Cross-process hand-off, SPIN wait (for comparison)", section_handoff_spin,
    handoff_child },
  { "silent", "A waiter woken by a key deleted without an unlock notification", section_silent,
    NULL },
  { "independent", "Independent keys: 8 threads, one name each", section_independent, NULL },
  { "contention", "Same-process contention: 8 threads on one name", section_contention, NULL },
  { "processes", "Cross-process contention: 4 single-threaded processes on one name",
    section_processes, processes_child },
  { "processes-scaling",
    "Cross-process contention: 2, 4, 16 and 64 single-threaded processes on one name",
    section_processes_scaling, processes_child },
  { "watchdog", "Watchdog tick with many held leases", section_watchdog, NULL },
  { "async", "lock_async/unlock_async from a main loop, and hand-offs to queued calls",
    section_async, NULL },
  { "fencing", "Fencing on vs off, and try_lock_all of 10 free locks", section_fencing, NULL },
  { "rwlock", "Read lock uncontended pair vs plain lock pair", section_rwlock, NULL },
  { "deadlock", "Deadlock detection on vs off: contended sections in one and two registries",
    section_deadlock, NULL },
  { "cluster-uncontended", "Uncontended lock+unlock on a 3-master Redis Cluster",
    section_cluster_uncontended, NULL },
  { "cluster-watchdog", "Watchdog tick with leases spread over 3 cluster masters",
    section_cluster_watchdog, NULL },
  { "cluster-notify", "Cluster bus messages per unlock notification, 3 masters + replicas",
    section_cluster_notify, NULL },
  { "tls", "Uncontended lock+unlock over TLS (rediss://)", section_tls, NULL },
  { "quorum", "Quorum (Redlock) on 3 private servers vs 1 node: lock+unlock and hand-off",
    section_quorum, NULL },
  { "memory", "Memory of the lock cache", section_memory, NULL },
};

#endif /* REDIS_LOCK_BENCH_SECTION_LIST_H */
