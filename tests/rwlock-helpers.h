/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rwlock-helpers.h: what the read-write lock tests (rwlock.c) use to take and check
 * holds: calls that assert success, the keys of a lock, a thread that reads or writes
 * and reports (RwTaker), the results of asynchronous calls, and the child process of the
 * two-process test. */
#ifndef REDIS_LOCK_TESTS_RWLOCK_HELPERS_H
#define REDIS_LOCK_TESTS_RWLOCK_HELPERS_H

#include <stdio.h>

#include "common.h"

/* The name the tests use. */
#define NAME "doc"

/* redis_lock_registry_obtain_rw(), asserting success. */
RedisRWLock *obtain_rw (RedisLockRegistry *registry, const char *name);
/* A read or write hold taken (within 20 s) or released, asserting success. */
void read_ok (RedisRWLock *lock);
void read_unlock_ok (RedisRWLock *lock);
void write_ok (RedisRWLock *lock);
void write_unlock_ok (RedisRWLock *lock);
/* Asserts that a try of @write (or read) with @wait_ms returns FALSE without an error
 * (not acquired in time), after about @wait_ms. */
void assert_not_acquired (RedisRWLock *lock, gboolean write, gint64 wait_ms);
/* The key `TEST_REGISTRY_KEY:{name}:rw:SUFFIX`, and the reader lease of @registry
 * (g_free()). */
char *rw_key (const char *name, const char *suffix);
char *reader_key (RedisLockRegistry *registry, const char *name);

/* A thread that reads or writes @lock (with @wait_ms and @cancellable), records what
 * came of it and when, and with @hold keeps a hold it got until released. */
typedef struct
{
  RedisRWLock *lock;
  gboolean write;
  gint64 wait_ms;
  GCancellable *cancellable;
  gboolean hold; /* keep the hold until release is set */

  TestSync sync;
  gint tid;
  gboolean returned;
  gboolean release;
  gboolean result;
  GError *error;
  gint64 returned_ms;
} RwTaker;

GThread *rw_taker_start (RwTaker *t, RedisRWLock *lock, gboolean write, gint64 wait_ms,
                         gboolean hold, GCancellable *cancellable);
/* Waits until the taker's thread has come to wait (asleep in the kernel). */
void rw_taker_wait_blocked (RwTaker *t);
/* Waits for the taker's call to return, lets it release what it holds, joins it. */
void rw_taker_release_join (RwTaker *t, GThread *thread);
/* Whether another thread can take a read hold of @lock at once (it gives it back). */
gboolean other_thread_reads (RedisRWLock *lock);

/* An asynchronous read or write call's result, set by on_async_done() (its callback,
 * with the AsyncResult as user data). */
typedef struct
{
  RedisRWLock *lock;
  gboolean write;
  gboolean done;
  gboolean result;
  GError *error;
} AsyncResult;

void on_async_done (GObject *source, GAsyncResult *result, gpointer data);
/* Iterates the thread-default context until @r is done (asserts within 20 s). */
void async_wait (AsyncResult *r);

/* Many asynchronous calls of one thread (on_many_done() their callback, with a
 * RwManyCall as user data), each unlocked by the callback as soon as it holds a write
 * (so the next writer may go); reads are counted, and those that came before
 * expected_writes writes did. */
typedef struct
{
  RedisRWLock *lock;
  guint done, writes, reads, reads_before_last_write;
  guint expected_writes;
  GError *first_error;
} RwMany;

typedef struct
{
  RwMany *many;
  gboolean write;
} RwManyCall;

void on_many_done (GObject *source, GAsyncResult *result, gpointer data);

/* The workers of a registry's asynchronous calls (async-pool.h). */
#define POOL_THREADS 4

/* Registers the tests of rwlock-faults.c. */
void rwlock_add_fault_tests (void);
/* Registers the tests of rwlock-index.c. */
void rwlock_add_index_tests (void);

/* The two-process test's child: `PROGRAM --rw-child URL NAME read|write` takes NAME on
 * URL, says "held", holds it until its stdin closes, releases it and says "done". */
int child_main (char **argv);

/* A child started by child_start(): its pid, its stdin and its stdout. */
typedef struct
{
  GPid pid;
  int in;
  FILE *out;
} Child;

/* Starts the child on @url with @mode ("read", "write") and returns once it holds. */
void child_start (Child *child, const char *url, const char *mode);
/* Closes the child's stdin (it releases) and asserts it said "done" and exited 0. */
void child_finish (Child *child);

#endif /* REDIS_LOCK_TESTS_RWLOCK_HELPERS_H */
