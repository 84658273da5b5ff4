/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-run.h: what the two files of `redislock run` share: the command line as
 * parsed (redislock-run-args.c) and the lease margin both the parser and the holder
 * (redislock-run.c) bound the kill grace by. */
#ifndef REDISLOCK_RUN_H
#define REDISLOCK_RUN_H

#include "redislock-tool.h"

/* How long --min-replicas waits for the replicas' acknowledgement. */
#define MIN_REPLICAS_TIMEOUT_MS 1000

/* What the command line of `run` asks for. */
typedef struct
{
  GPtrArray *names; /* the lock names (const char *), NULL-terminated */
  char **command;
  gboolean fencing;
  gboolean wait_queue; /* --wait-queue */
  gboolean read; /* --read: NAME is a read-write lock, held for reading */
  guint permits;  /* --permits: NAME is a semaphore of so many permits; 0 for a lock */
  gint64 wait_ms; /* -1: forever */
  gint64 ttl_ms;
  gint64 kill_after_ms;
  guint min_replicas;
} RunArgs;

/* libredislock's drift margin for a lease of @ttl_ms (drift_margin_us() in
 * src/leases.c): 5% of the TTL, at least 25 ms, at most half the TTL. A lease is
 * reported lost once it has gone unconfirmed for the TTL less this margin, so its key
 * cannot expire, and another client take the lock, sooner than this margin after the
 * report: the command must be dead by then. */
gint64 lease_margin_us (gint64 ttl_ms);

/* The shortest --ttl taken: at 100 ms a renewal sent at a third of the TTL still has
 * about 40 ms to be confirmed before the lease counts as lost (the margin's 25 ms
 * floor is a quarter of it); below 50 ms the margin is half the TTL and the time left
 * is a few milliseconds. libredislock itself takes any TTL from 1 ms. */
#define MIN_TTL_MS 100

/* The command line of `run`: options, NAME, COMMAND. Returns -1 to go on, else an
 * exit status (a usage error was printed). */
int parse_run_arguments (int argc, char **argv, RunArgs *args);

#endif /* REDISLOCK_RUN_H */
