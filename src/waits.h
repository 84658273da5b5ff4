/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* waits.h: who waits for whom: the waits-for records of waiting threads and the
 * deadlock check made from them (see waits.c). */
#ifndef RL_WAITS_H
#define RL_WAITS_H

#include <glib.h>

#include "redislock/redislock.h"
#include "store.h"

/* The first check of a wait comes this long after it began (shorter waits cost
 * nothing), the next ones at this interval; a record lives this long unless renewed. */
#define RL_WAITS_FIRST_CHECK_MS 300
#define RL_WAITS_CHECK_MS 500
#define RL_WAITS_RECORD_TTL_MS 3000

/* One waiting acquisition, kept by the thread that waits (on its stack), from the start
 * of its wait to its end. Only waits.c writes the fields; the driver reads check_at. */
typedef struct
{
  RedisLock *lock;   /* what it waits for (a read-write lock's: one of its lease carriers) */
  const char *key;   /* the key it waits for: lock->key_data, or for a read-write lock
                        the prefix of all its keys (then prefix is set) */
  gboolean prefix;   /* it waits for every lease whose key begins with key */
  gint64 started;    /* monotonic µs when the wait began */
  gint64 since_us;   /* the same on the wall clock, fixed at the first check (0: none
                        yet), so that every record of the wait orders it alike */
  gint64 check_at;   /* monotonic µs of the next check; RL_FOREVER: none */
  gint64 deadline;   /* the acquisition's (monotonic µs), which bounds the checks' requests */
  gboolean bounded;  /* the acquisition's requests are cut short at its deadline */
  gboolean recorded; /* its record may be in the store */
  char id[RL_LEASE_VALUE_MAX]; /* the wait's id: client id and a number of its own;
                                  empty until the first check */
} RlWaiting;

/* One record as read back (rl_waits_read()). */
typedef struct
{
  char *id;
  char *key;     /* the lock key waited for, or the prefix of those (prefix) */
  gboolean prefix; /* a wait for every lease whose key begins with key: a read-write
                      lock's, whose holders are its writer and each reader lease */
  char *host;
  gint64 pid;
  gint64 since_us; /* wall clock µs when the wait began */
  GPtrArray *held_keys;   /* char *: the lock keys the waiting thread holds */
  GPtrArray *held_values; /* char *: the value of each, the same index */
} RlWaitRecord;

void rl_wait_record_free (RlWaitRecord *record);

/* A wait for @lock begins now, for an acquisition that ends at @deadline (with
 * @bounded, its requests do not outlast it): checks are planned when the registry
 * detects deadlocks and its store keeps records (otherwise check_at is RL_FOREVER).
 * Costs no I/O. */
void rl_waiting_begin (RlWaiting *waiting, RedisLock *lock, gint64 deadline, gboolean bounded);
/* The same for a read-write lock's acquisition: @carrier is one of its lease carriers,
 * @prefix the prefix of all its lease keys; the wait is for each holder of one of
 * them (a waiting writer waits for every reader, a reader for the writer, or for the
 * readers a waiting writer waits for). */
void rl_waiting_begin_prefix (RlWaiting *waiting, RedisLock *carrier, const char *prefix,
                              gint64 deadline, gboolean bounded);
static inline gboolean
rl_waiting_due (const RlWaiting *waiting, gint64 now)
{
  return now >= waiting->check_at;
}
/* The check that came due: the record written or renewed, and the records of every
 * waiter read in the same request; then, when this wait is the one that began last
 * in a cycle of waits, the cycle confirmed by reading its locks' values and the
 * records again. FALSE with REDIS_LOCK_ERROR_DEADLOCK (the message naming the cycle)
 * when it is confirmed. A store that fails is not a verdict: the check is planned
 * again. The caller holds no mutex. */
gboolean rl_waiting_check (RlWaiting *waiting, GError **error);
/* The wait is now for @lock (a set of locks waits for the one its last attempt found
 * held); a record already written in another registry's store is deleted first. */
void rl_waiting_retarget (RlWaiting *waiting, RedisLock *lock);
/* The wait ended, however: its record, if it wrote one, is deleted, with no more than
 * RL_MIN_REQUEST_MS past a bounded acquisition's deadline for it (a record that stays
 * expires, RL_WAITS_RECORD_TTL_MS). */
void rl_waiting_end (RlWaiting *waiting);

/* Every record on @store (RlWaitRecord), or NULL with @error; an empty array when the
 * store keeps none. The request is bounded by @deadline (0: the command timeout). */
GPtrArray *rl_waits_read (RlStore *store, gint64 deadline, GError **error);

/* The process-wide list of registries whose held leases the records name: a waiting
 * thread's record lists what it holds in every registry of the process on the same
 * registry key. */
void rl_waits_register (RedisLockRegistry *registry);
void rl_waits_unregister (RedisLockRegistry *registry);

/* A read-write lock's lease carrier @carrier is held (or no longer) by @owner (a GThread,
 * or the marker of an asynchronous call): a record of @owner's waits lists its lease.
 * A process-wide set under a mutex of its own taken with no other inside it, so it may
 * be called under any mutex. */
void rl_waits_hold (RedisLock *carrier, gpointer owner, gboolean held);
/* @carrier is freed: no owner holds it any more. */
void rl_waits_forget (RedisLock *carrier);

#endif /* RL_WAITS_H */
