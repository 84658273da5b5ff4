/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock-private.h: what the files of the lock share. lock.c takes a lock (the local
 * mutex, then the lease through the acquisition machine); unlock.c gives it back (the
 * unlock plan: keep, hand over, release); lock-local.c holds the local mutex's rules
 * both apply (granting it when it comes free), so those rules have one place. The
 * calls go unlock.c -> lock-local.c and lock.c -> {unlock.c, lock-local.c}.
 */
#ifndef RL_LOCK_PRIVATE_H
#define RL_LOCK_PRIVATE_H

#include "internal.h"

/* Holds in a row a thread may barge in ahead of local waiters before the mutex is
 * reserved for them. */
#define RL_LOCAL_BARGE_MAX 4

/* The calling thread's GThread, which the owner field holds, kept in a thread-local
 * variable: g_thread_self() looks it up in a GPrivate on every call, a visible part
 * of a re-entry's few nanoseconds. */
static inline gpointer
rl_lock_current_thread (void)
{
  static __thread gpointer self;

  if (G_UNLIKELY (self == NULL))
    self = g_thread_self ();
  return self;
}

/* Whether the calling thread (@self) owns the local mutex, read without taking it:
 * only @self, or an asynchronous call of @self handing its hold over (rl_lock_set_owner(),
 * with the hold count already set), ever sets the owner to @self, and only the owner
 * clears it, so a TRUE answer cannot change under the caller's feet (a FALSE one turns
 * TRUE when the call is granted, which acquire_local() watches for). While a thread
 * owns the lock, it alone reads and changes the hold count, so re-entry and an inner
 * unlock need no lock->m either. */
static inline gboolean
rl_lock_owned_by_caller (RedisLock *lock, gpointer self)
{
  return g_atomic_pointer_get (&lock->owner) == self;
}

/* The lock's condition variables, made on first need. lock->m held. */
RlLockWait *rl_lock_wait_state (RedisLock *lock);
/* Gives up the local mutex and wakes the next local waiter. lock->m held. */
void rl_lock_release_local_locked (RedisLock *lock);
/* Grants the free mutex to the next queued waiter, or wakes one waiting thread (once:
 * it looks at the mutex anyway). lock->m held. */
void rl_lock_wake_local_waiter (RedisLock *lock);
/* Makes @self the owner; @waited: it comes out of the wait for the mutex (and may take a
 * reserved one). Returns whether the previous owner left the lease for it. lock->m
 * held. */
gboolean rl_lock_take_ownership_locked (RedisLock *lock, gpointer self, gboolean waited);

/* The attempt a release notification sends for the lock's sleeping owner
 * (lock-pretake.c). */

/* Whether @lock's acquisitions may have their attempt sent by the notification side:
 * a plain lock on a store with stepwise requests. */
gboolean rl_pretake_possible (RedisLock *lock);
/* The owner, about to sleep for a notification, asks for its next attempt to be sent
 * for it (@ttl_ms, its acquisition's @deadline and @bounded as for its own attempts).
 * FALSE when the slot is busy. lock->m held. */
gboolean rl_pretake_arm_locked (RedisLock *lock, gint64 ttl_ms, gint64 deadline,
                                gboolean bounded);
/* What the armed owner's sleep finds. */
typedef enum
{
  RL_PRETAKE_NONE,    /* nothing sent for it: sleep and wake as ever */
  RL_PRETAKE_PENDING, /* an attempt is being sent for it: wait for it */
  RL_PRETAKE_HANDED,  /* an attempt was sent for it, now its own: rl_pretake_finish() */
} RlPretakeWait;
RlPretakeWait rl_pretake_check_locked (RedisLock *lock);
/* The owner stops sleeping without the attempt: one being sent is finished and its
 * lease released by the notification side. lock->m held. */
void rl_pretake_disarm_locked (RedisLock *lock);
/* The notification side claims the armed slot, when it is; then rl_pretake_run(). lock->m
 * held. */
gboolean rl_pretake_claim_locked (RedisLock *lock);
/* The lease an attempt sent for the owner took. */
typedef struct
{
  guint64 serial;
  gint64 sent;
  gint64 ttl_ms;
} RlPretakeLease;
/* The owner reads the reply of the attempt handed to it (RL_PRETAKE_HANDED): OK (the
 * lease is *lease's, not yet in the table), HELD or ERROR (a lease it may have taken is
 * released in the background). No mutex held. */
RlLeaseResult rl_pretake_finish (RedisLock *lock, RlPretakeLease *lease);
/* Releases a lease of @lock (@value) that nobody will hold (compare-and-delete); in the
 * background when the store does not answer. */
void rl_pretake_release_unused (RedisLock *lock, const char *value, gint64 ttl_ms);

/* lock-queue.c: the owner's place in the store's wait queue. */
/* The place is now that of the attempt @serial sent at @sent (0: none). */
void rl_lock_set_queued (RedisLock *lock, guint64 serial, gint64 sent);
/* The serial of the attempt that holds the place (0: none), and in *sent its send
 * time. */
guint64 rl_lock_queued_serial (RedisLock *lock, gint64 *sent);
/* The store's acquire_queued() for the owner's attempt @value (@serial, sent at
 * @sent): the place it takes or keeps is remembered; *pttl_ms, when queued, is cut to
 * the refresh interval, so that the next attempt keeps the place alive. */
RlLeaseResult rl_lock_attempt_queued (RedisLock *lock, const char *value, guint64 serial,
                                      gint64 sent, gint64 ttl_ms, gint64 request_deadline,
                                      const char *fence_key, gboolean contended,
                                      guint64 *token, gint64 *pttl_ms, GError **error);
/* The owner stops waiting in line: its place (if any) is left, and a grant that came
 * for it meanwhile released again, granting to the next in line. */
void rl_lock_leave_line (RedisLock *lock);
gboolean rl_lock_queue_wanted (RedisLock *lock);
/* The report of the owner's attempt: one that left it in line counts as soon as the
 * subscription is up (a release grants and tells it on the registry's own channel), so
 * the first attempt of an acquisition needs no watch step and second attempt after it. */
void rl_lock_queued_report (RedisLock *lock, const RlAcquire *acq, gboolean pubsub,
                            RlAttemptReport *report);
/* Whether a grant was heard for the owner's place (rl_lock_granted()). lock->m held. */
gboolean rl_lock_grant_heard_locked (RedisLock *lock);
/* The grant heard is the owner's now: the lease of the attempt that kept the place
 * (*taken: its serial, its send time, which is before the grant's write, and @ttl_ms;
 * @value), with the fencing token *token; the place is forgotten. */
void rl_lock_take_grant (RedisLock *lock, gint64 ttl_ms, RlPretakeLease *taken,
                         char value[RL_LEASE_VALUE_MAX], guint64 *token);

#endif /* RL_LOCK_PRIVATE_H */
