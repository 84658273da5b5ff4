/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify-helpers.h: what the files of the notify test program share (notify.c,
 * notify-foreign.c, notify-down.c): a thread that waits for a lock and reports
 * (Waiter), and registries whose waiters only a notification or an expiry can wake. */
#ifndef REDIS_LOCK_TESTS_NOTIFY_HELPERS_H
#define REDIS_LOCK_TESTS_NOTIFY_HELPERS_H

#include "common.h"

#define REGISTRY_KEY TEST_REGISTRY_KEY
#define MINUTE_MS 60000

/* A thread that waits for a lock, what came of it, and whether it keeps the lock. */
typedef struct
{
  RedisLock *lock;
  gboolean use_lock; /* redis_lock_lock () rather than try_lock_for () */
  gint64 wait_ms;
  GCancellable *cancellable;
  gboolean hold; /* once acquired, keep the lock until waiter_finish () */

  TestSync sync;
  gboolean returned;
  gboolean acquired;
  GError *error;
  gint64 returned_at_ms;
  gboolean release;
  gboolean unlocked;
  GError *unlock_error;
  GThread *thread;
} Waiter;

/* Starts a thread that calls redis_lock_lock () (@use_lock) or redis_lock_try_lock_for
 * (@wait_ms, @cancellable) on @lock. Takes ownership of @cancellable. */
Waiter *waiter_start_full (RedisLock *lock, gboolean use_lock, gint64 wait_ms,
                           GCancellable *cancellable, gboolean hold);

/* waiter_start_full() without a cancellable. */
Waiter *waiter_start (RedisLock *lock, gboolean use_lock, gint64 wait_ms, gboolean hold);

/* Waits up to @timeout_ms for the waiter's acquisition call to return; returns whether
 * it did. */
gboolean waiter_wait_returned (Waiter *w, gint64 timeout_ms);

/* Whether the waiter's acquisition call has returned, without waiting. */
gboolean waiter_has_returned (Waiter *w);

/* Lets a holding waiter unlock, joins it, checks its unlock succeeded, and frees it. */
void waiter_finish (Waiter *w);

/* Asserts that the waiter's call returns within @timeout_ms, having acquired the lock
 * without an error. */
void waiter_assert_acquired (Waiter *w, gint64 timeout_ms);

/* A registry whose waiters could only be woken by a notification or an expiry: a SPIN
 * retry would come after a minute, the leases it takes last a minute, and its waiters
 * do not wait in line (whose places they would refresh every second). */
RedisLockRegistry *registry_new_slow_spin (TestFixture *fx);

/* Starts a waiter on @lock and returns once it has found the lock held in Redis at least
 * once, i.e. it is now (or about to be) asleep waiting for the holder. */
Waiter *waiter_start_contended_full (RedisLockRegistry *r, RedisLock *lock, gboolean use_lock,
                                     gint64 wait_ms, GCancellable *cancellable, gboolean hold);

/* waiter_start_contended_full() without a cancellable. */
Waiter *waiter_start_contended (RedisLockRegistry *r, RedisLock *lock, gboolean use_lock,
                                gint64 wait_ms, gboolean hold);

/* The tests of notify-foreign.c, added by notify.c's main(). */
void notify_add_foreign_tests (void);

/* The tests of notify-down.c (waiters while the subscription is down), likewise. */
void notify_add_down_tests (void);

#endif /* REDIS_LOCK_TESTS_NOTIFY_HELPERS_H */
