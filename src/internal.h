/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* internal.h: the registry and lock structures. Included by the files of the lock
 * core (registry.c, lock.c, leases.c, leases-lost.c, multilock.c, locker.c, leader.c,
 * waits.c, process.c, semaphore.c) and, through the private headers built on it, by
 * the files that include those: lock-private.h (lock-local.c, unlock.c),
 * leases-private.h, rwlock.h, semaphore.h, async-pool.h (lock-async.c, async-pool.c)
 * and async-driver.h.
 *
 * Each field has one writer, named beside it: the cache (registry.c, under
 * registry->cache_mutex), the local mutex (lock.c, lock-local.c and unlock.c, under
 * lock->m), the lease fields (leases.c, under its own mutex, see leases.h). The lock
 * order of these mutexes and every other is in sync.h; the lease table's renew mutex
 * is the one mutex held across a store call (renewals go one at a time, see leases.c).
 * The user's callback is called with no mutex held. Nothing that holds lock->m or the
 * lease table's mutex calls the store, so no Redis round trip ever happens under a
 * mutex a lock or unlock may need.
 *
 * The calls between the files go one way: registry.c -> lock.c -> unlock.c ->
 * lock-local.c (which calls none of the others); registry.c, lock.c and unlock.c ->
 * leases.c -> {leases-lost.c, watchdog.c, the store}; lock-async.c calls lock.c and unlock.c, and lock.c reaches its queued waiters
 * (RlLockWaiter) only through their callbacks. lock.c, lock-async.c, multilock.c and
 * semaphore.c each drive the acquisition machine of acquire.c (acquire.h), which
 * calls none of them. What a lower file needs of the registry (is it closed or
 * forked, its settings, its store) it reads from these structures through the inline
 * functions below, never by calling up.
 */
#ifndef RL_INTERNAL_H
#define RL_INTERNAL_H

#include <gio/gio.h>
#include <pthread.h>

#include "redislock/redislock.h"
#include "acquire.h"
#include "debug.h"
#include "leases.h"
#include "settings.h"
#include "store.h"
#include "sync.h"

struct _RedisLockRegistry
{
  gint ref_count; /* atomic */
  gint closed;    /* atomic */
  guint fork_generation;
  char *registry_key;
  gsize key_prefix_len; /* strlen (registry_key) + 1: where a name starts in its lock key */
  char *client_id;
  RlStore *store;
  RlStoreContext store_ctx;
  RedisLockRegistryStats stats; /* atomic counters */
  RlSettings settings;          /* written by registry.c's setters, atomically */
  gint fencing;                 /* atomic, written by registry.c: acquisitions take a token */
  gboolean quorum;              /* set at creation: the store is a quorum store (no fencing) */
  RlLeases *leases;
  gpointer async_pool;              /* atomic: async-pool.c's workers, made on the first
                                       asynchronous call; NULL: none yet */
  GDestroyNotify async_pool_release; /* set with it: registry.c calls it when it frees
                                        the registry (workers still running keep the
                                        pool until they leave) */

  /* The lock cache. */
  RlMutex cache_mutex; /* guards the cache below */
  GHashTable *locks;   /* name -> RedisLock (the cache's reference) */
  RedisLock *lru_head; /* least recently obtained first */
  RedisLock *lru_tail;
  guint capacity;
  GHashTable *rw_locks; /* cache_mutex: name -> RedisRWLock (rwlock.h), while referenced,
                           held or waited on */
};

/* A request to the store cut short by the caller's deadline with less than this left
 * for it ran out of time (the call returns "not acquired in time"); with more, a store
 * that did not answer has failed (CONNECTION), as it would at the command timeout. */
#define RL_MIN_REQUEST_MS 20

/* Condition variables of a lock, made when a thread first has to wait for it: most
 * cached locks are never contended, and a pair of pthread_cond_t is 96 bytes. */
typedef struct _RlLockWaiter RlLockWaiter;
typedef struct _RlPretake RlPretake;

typedef struct
{
  RlCond local;       /* owner became NULL, or the registry closed */
  RlCond notify;      /* notify_seq changed, cancelled, or the registry closed */
  RlYieldRecord yield; /* the yield policy's record of the holds (acquire.h) */
  GQueue queue;       /* RlLockWaiter, in order of arrival, counted in lock->waiters */
  GQueue sleepers;    /* RlLockWaiter (by their link) sleeping until notify_seq moves
                         past their seq: the queued waiter that owns the mutex, and the
                         asynchronous acquisitions of a semaphore or a read-write lock's
                         lease (async-driver.c) */
  gboolean queue_went_last; /* threads wait too, and the mutex last went to the queue */
  RlPretake *pretake;  /* the attempt a notification sends for the sleeping owner
                          (lock-pretake.c), made when the owner first arms it */
  /* The owner's place in the store's wait queue (lock.c): */
  guint64 queued_serial;  /* the serial of the attempt that took or kept it; 0: none */
  gint64 queued_sent;     /* when that attempt was sent (monotonic µs) */
  guint64 granted_serial; /* a release granted the lock to that place (rl_lock_granted()) */
  guint64 granted_token;  /* ... with this fencing token (0: none) */
  gboolean line_recent;   /* the last acquisition waited in line: the next one's first
                             attempt goes to the queue's script without a SET NX first */
} RlLockWait;

/* A waiter for the local mutex that is not a blocked thread: an _async call
 * (lock-async.c). It waits in the lock's queue; whoever frees the mutex grants it
 * (lock->owner becomes the waiter itself, a marker no thread compares equal to), and
 * notifications, close and cancellation poke it. Both functions are called with
 * lock->m held, from any thread, and must only schedule work. */
struct _RlLockWaiter
{
  GList link; /* lock.c: in wait->queue, or in wait->sleepers (never both) */
  /* The mutex is the waiter's now (@kept: with the lease handed over). */
  void (*granted) (RlLockWaiter *waiter, gboolean kept);
  /* Look again: a notification, close, or a sleep cut short. */
  void (*poke) (RlLockWaiter *waiter);
};

/* Laid out small: an idle cached lock costs this struct, its key and a hash slot.
 * Fields guarded by different mutexes never share a memory location. */
struct _RedisLock
{
  gint ref_count;      /* atomic; memory only: the cache holds one while the lock is cached */
  guint user_refs;     /* registry->cache_mutex; references handed out by obtain/ref */
  RedisLock *lru_prev; /* registry->cache_mutex */
  RedisLock *lru_next; /* registry->cache_mutex */
  gint64 last_used;    /* atomic, monotonic µs */
  RedisLockRegistry *registry;

  /* The local recursive mutex: lock->m guards these. */
  RlMutex m;
  RlLockWait *wait;   /* made by the first thread that waits */
  gpointer owner;     /* GThread of the holder (or the marker of an asynchronous call
                         holding it for its thread), NULL when free; written
                         atomically, so the holder may read it without lock->m */
  guint count;        /* the holder's hold count; only the holder reads or writes it
                         (set before the owner field names the holder) */
  guint waiters;      /* threads and queued calls waiting for the local mutex */
  guint16 notify_seq; /* bumped when the store says the lease may have been released
                         (waiters only compare it with what they read: it may wrap) */
  guint16 handoffs;   /* local hand-offs in a row since the lease was taken (the bound,
                         max_local_handoffs, is at most G_MAXUINT16) */
  /* One byte of flags, all under lock->m (a bit-field shares its byte). */
  guint8 handed_over : 1;  /* the lease stays for the next local owner (a local hand-off) */
  guint8 streak_extended : 1; /* a streak already ended with the lease kept (nobody else listened) */
  guint8 waking : 1;      /* a waiter was signalled and has not run yet */
  guint8 reserved : 1;    /* the mutex is free for a waiting thread only (see lock.c) */
  guint8 barged : 3;      /* holds in a row taken by threads that did not wait, others
                             waiting; saturates at RL_LOCAL_BARGE_MAX */

  guint8 cached; /* registry->cache_mutex */
  guint8 member; /* set at creation, then read-only: RL_MEMBER_LOCK, or the kind of lease
                    of another member of the lock family this object carries (a permit,
                    a read-write lock's reader or writer lease): such an object is never
                    cached nor handed to the application, and the lease-lost callback
                    gets NULL for it */

  RlLeaseFlags lease_flags; /* leases.c only */
  RlLeaseState lease;       /* leases.c only */

  char key_data[]; /* one allocation for the struct and its key */
};

/* What a RedisLock object stands for. A member of the lock family other than the plain
 * lock (a semaphore's permit, a read-write lock's lease) carries each of its leases in a RedisLock of its own, made
 * by rl_lock_new() and never cached, so that the lease table, the watchdog, audits and
 * lost marking serve it unchanged; the lease-lost callback then gets NULL (the object
 * is not the user's), and the name is logged. */
enum
{
  RL_MEMBER_LOCK = 0,
  RL_MEMBER_PERMIT = 1,
  RL_MEMBER_RW_LEASE = 2, /* a read-write lock's reader or writer lease */
};

/* A lock's key, registry_key ":" name, is stored once, after the struct; its name is
 * the tail of it. (Two pointers into it would cost 16 bytes per cached lock.) */
static inline const char *
rl_lock_name (const RedisLock *lock)
{
  return lock->key_data + lock->registry->key_prefix_len;
}

/* Longest lease TTL accepted (about 100 years): microsecond arithmetic on it cannot
 * overflow, and Redis accepts it as a PX argument. */
#define RL_TTL_MAX_MS ((gint64) 100 * 365 * 24 * 3600 * 1000)

/* Whether @ttl_ms is a lease TTL a call takes: 1 to RL_TTL_MAX_MS, or 0 for the
 * registry's; else FALSE with REDIS_LOCK_ERROR_INVALID. */
static inline gboolean
rl_check_ttl (gint64 ttl_ms, GError **error)
{
  if (ttl_ms >= 0 && ttl_ms <= RL_TTL_MAX_MS)
    return TRUE;
  g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID,
               "Invalid lease TTL %" G_GINT64_FORMAT " ms: it must be 1 to %" G_GINT64_FORMAT
               " ms, or 0 for the registry's TTL",
               ttl_ms, RL_TTL_MAX_MS);
  return FALSE;
}

/* process.c: the fork guard. */
extern guint rl_fork_generation;
void rl_fork_guard_init (void);

/* The registry's state as the files below it read it. */
static inline gboolean
rl_registry_is_closed (RedisLockRegistry *registry)
{
  return g_atomic_int_get (&registry->closed) != 0;
}

static inline gboolean
rl_registry_is_forked (RedisLockRegistry *registry)
{
  return registry->fork_generation != __atomic_load_n (&rl_fork_generation, __ATOMIC_RELAXED);
}

/* FALSE with INVALID unless @name is a lock name: 1 to REDIS_LOCK_NAME_MAX bytes, any
 * bytes but NUL (registry.c). */
gboolean rl_registry_check_name (const char *name, GError **error);

/* FALSE with FORKED or CLOSED when the registry may not be used. */
static inline gboolean
rl_registry_check (RedisLockRegistry *registry, GError **error)
{
  if (G_UNLIKELY (rl_registry_is_forked (registry)))
    {
      g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_FORKED,
                           "This lock registry was created before fork() and cannot be used in "
                           "the child process; create a new registry there");
      return FALSE;
    }
  if (G_UNLIKELY (rl_registry_is_closed (registry)))
    {
      g_set_error_literal (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CLOSED,
                           "The lock registry is closed");
      return FALSE;
    }
  return TRUE;
}

/* Whether @registry waits for notifications (PUBSUB) rather than polling (SPIN). */
static inline gboolean
rl_registry_pubsub (RedisLockRegistry *registry)
{
  return g_atomic_int_get (&registry->settings.wait_mode) == REDIS_LOCK_WAIT_PUBSUB;
}

/* How a waiter of @key on @registry's store would learn of a release, asked before an
 * attempt (@pubsub: the wait mode read for the acquisition; @need_watch: the machine
 * wants notifications, so they are confirmed, without waiting). */
static inline RlNotifyState
rl_registry_notify_state (RedisLockRegistry *registry, const char *key, gboolean pubsub,
                          gboolean need_watch)
{
  if (!pubsub)
    return RL_NOTIFY_OFF;
  return need_watch && rl_store_watch (registry->store, key, FALSE, 0) ? RL_NOTIFY_CONFIRMED
                                                                        : RL_NOTIFY_DOWN;
}

/* The machine's RL_ACQUIRE_WATCH on @registry's store for a waiter of the acquisition's
 * name: confirms notifications, waiting for them (@may_wait) as long as the machine
 * allows and the connect timeout at most, or only starting them; reports to @acq, and
 * returns what to do next. The first one of an acquisition (its wait begins) joins the
 * store's waiters of its name, which rl_registry_leave() leaves when the acquisition
 * ends, so that a store subscribed per key drops the subscription with its last
 * waiter. (A set of locks watches each of its keys: multilock.c.) */
static inline RlAcquireAction
rl_registry_watch (RedisLockRegistry *registry, RlAcquire *acq, gboolean may_wait)
{
  gint64 limit = 0;
  gboolean join = acq->joined == NULL;

  if (may_wait)
    limit = MIN (acq->watch_ms, RL_ATOMIC_GET (registry->store_ctx.connect_timeout_ms));
  if (join)
    acq->joined = registry->store;
  return rl_acquire_watched (acq, rl_store_watch (registry->store, acq->name, join, limit));
}

/* @acq ends (acquired, not in time, failed, cancelled, closed): it leaves the waiters
 * of its name it joined, if it did. Every driver calls it once its acquisition is
 * over: the blocking ones through g_auto (RlAcquire), the asynchronous ones when the
 * call completes. */
static inline void
rl_registry_leave (RlAcquire *acq)
{
  RlStore *store = acq->joined;

  acq->joined = NULL;
  if (store != NULL)
    rl_store_unwatch (store, acq->name);
}
G_DEFINE_AUTO_CLEANUP_CLEAR_FUNC (RlAcquire, rl_registry_leave)

/* The deadline (monotonic µs) of a request sent at @now by an acquisition that must
 * end at @deadline: the command timeout from @now, and with @bounded no later than
 * @deadline. The one place where the caller's wait and the command timeout meet: the
 * store carries the result down to the poll() of each exchange and to the setting up
 * of a new connection (store.h, rl_store_deadline()). */
static inline gint64
rl_request_deadline (RedisLockRegistry *registry, gint64 deadline, gboolean bounded, gint64 now)
{
  gint64 own = rl_deadline_after (now, RL_ATOMIC_GET (registry->store_ctx.command_timeout_ms));

  return bounded ? MIN (own, deadline) : own;
}

/* The deadline of a request that tidies up after an acquisition that ends at
 * @deadline (its waits-for record deleted, a writer's mark removed): as
 * rl_request_deadline() from now, but never less than RL_MIN_REQUEST_MS away, so that
 * a wait that ran out still asks a store that answers at once, and a frozen one does
 * not hold the caller past its wait. */
static inline gint64
rl_cleanup_deadline (RedisLockRegistry *registry, gint64 deadline, gboolean bounded)
{
  gint64 now = g_get_monotonic_time ();

  return rl_request_deadline (registry, MAX (deadline, now + RL_MIN_REQUEST_MS * 1000), bounded,
                              now);
}

/* Whether a request sent at @sent with the deadline @request_deadline, which failed
 * with @error, only ran out of the caller's wait (@deadline), which had a mere sliver
 * left for it: not acquired in time, not a verdict on the store. */
static inline gboolean
rl_request_ran_out (gint64 request_deadline, gint64 sent, gint64 deadline, const GError *error)
{
  return request_deadline == deadline && deadline - sent < RL_MIN_REQUEST_MS * 1000
         && g_get_monotonic_time () >= deadline
         && g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION);
}

/* The end of an attempt whose request (rl_request_deadline() above) did not take the
 * lease of @what@name: HELD is counted as a contended attempt and returned; else the
 * request failed with *@local_error, which is passed on to @error unless the request
 * only ran out of the caller's wait (a debug message then, and no error: not acquired
 * in time), and ERROR is returned. */
static inline RlLeaseResult
rl_attempt_not_taken (RedisLockRegistry *registry, RlLeaseResult result, const char *what,
                      const char *name, gint64 request_deadline, gint64 sent, gint64 deadline,
                      GError **local_error, GError **error)
{
  if (result == RL_LEASE_HELD)
    {
      RL_ATOMIC_ADD (registry->stats.contended_attempts, 1);
      return RL_LEASE_HELD;
    }
  if (rl_request_ran_out (request_deadline, sent, deadline, *local_error))
    rl_debug ("acquiring %s%s: the wait ended during the request: %s", what, name,
             (*local_error)->message);
  else
    g_propagate_error (error, g_steal_pointer (local_error));
  return RL_LEASE_ERROR;
}

/* lock.c */
RedisLock *rl_lock_new (RedisLockRegistry *registry, const char *name);

/* Frees a lock's slot of lock-pretake.c (no request in it). */
void rl_pretake_free (RlPretake *pretake);

/* Drops a reference to the lock's memory (the cache's, a pin of the lease table, or one
 * taken with g_atomic_int_inc (&lock->ref_count)); the last frees it. Inline, so that the
 * lease table, which pins locks below lock.c, can drop its references without calling
 * up into lock.c. */
static inline void
rl_lock_unref_memory (RedisLock *lock)
{
  if (!g_atomic_int_dec_and_test (&lock->ref_count))
    return;
  g_clear_object (&lock->lease.cancellable);
  if (lock->wait != NULL)
    {
      rl_cond_clear (&lock->wait->local);
      rl_cond_clear (&lock->wait->notify);
      rl_pretake_free (lock->wait->pretake);
      g_free (lock->wait);
    }
  rl_mutex_clear (&lock->m);
  g_free (lock);
}
gboolean rl_lock_is_idle (RedisLock *lock);
void rl_lock_notify (RedisLock *lock);
/* As rl_lock_notify(), for a release notification of @lock's key: TRUE when the lock's
 * sleeping owner had its next attempt sent for it claimed; the caller then calls
 * rl_pretake_run() with no mutex held, keeping a reference to the lock's memory. */
gboolean rl_lock_notify_release (RedisLock *lock);
/* A release granted @lock's key to this registry with the lease value of @serial and
 * the fencing token @token (store.h's RlStoreGrantedFunc): the owner waiting in line
 * with that value (or whose attempt that sent it is still under way) is woken to hold
 * it; a grant for an older place is ignored, the owner's next attempt takes it
 * (lock-queue.c). */
void rl_lock_granted (RedisLock *lock, guint64 serial, guint64 token);
/* Sends the claimed attempt and hands it to the owner (lock-pretake.c). */
void rl_pretake_run (RedisLock *lock);
void rl_lock_wake_all (RedisLock *lock);
/* With fencing on, the key of @lock's fencing counter (g_free()); NULL with fencing
 * off. FALSE with INVALID when that counter could not share the lock key's slot. */
gboolean rl_lock_fence_key (RedisLock *lock, char **fence_key, GError **error);

/* lock.c's steps, for multilock.c, which takes and releases several locks with them.
 * An acquisition is the local mutex, then the lease; an unlock, the local part, then
 * the outermost unlock's plan. */

/* How the calling thread came to own the local mutex. */
typedef enum
{
  RL_LOCAL_FAILED,      /* it did not: timeout (no error), cancelled or closed */
  RL_LOCAL_REENTERED,   /* it held it already: one more hold, the lease is there */
  RL_LOCAL_NEEDS_LEASE, /* it owns it now, without a lease */
  RL_LOCAL_WITH_LEASE,  /* it owns it now, with the lease handed over by the previous owner */
} RlLocalTake;

/* Takes the local mutex of @lock until @deadline (the caller wakes it on cancel). */
RlLocalTake rl_lock_take_local (RedisLock *lock, gint64 deadline, GCancellable *cancellable,
                                GError **error);
/* Undoes rl_lock_take_local() (@taken: what it returned) when the acquisition as a
 * whole failed: one hold less, or the mutex free again (a lease handed over goes on as
 * at an unlock). Only for a lock whose lease this acquisition did not take. */
void rl_lock_give_back_local (RedisLock *lock, RlLocalTake taken);
/* The lock's notification number, to read before an attempt and sleep on after it. */
guint16 rl_lock_notify_seq (RedisLock *lock);

/* What an attempt of an acquisition @acq on @registry's store reports besides its
 * verdict, read before its request: how a release would be heard (@pubsub: the wait
 * mode read for the acquisition), the notification number of @notified (the lock object
 * whose number the acquisition sleeps on) and the spin interval. */
static inline RlAttemptReport
rl_attempt_report_begin (RedisLockRegistry *registry, RedisLock *notified, gboolean pubsub,
                         const RlAcquire *acq)
{
  RlAttemptReport report = { .pttl_ms = -1 };

  report.notify = rl_registry_notify_state (registry, acq->name, pubsub, acq->need_watch);
  report.seq = rl_lock_notify_seq (notified);
  report.spin_ms = RL_ATOMIC_GET (registry->settings.idle_between_tries_ms);
  return report;
}

/* The machine's verdict on a store's answer to an acquisition. */
static inline RlAttemptResult
rl_attempt_result_of (RlLeaseResult result)
{
  return result == RL_LEASE_OK ? RL_ATTEMPT_TAKEN
         : result == RL_LEASE_HELD ? RL_ATTEMPT_HELD
                                   : RL_ATTEMPT_FAILED;
}

/* Sleeps as @acq says (RL_ACQUIRE_SLEEP: until its wake_at, or until the lock's
 * notification number moves past its seq when it watches it), or until close or
 * cancel. Returns the notification number it last saw, for the next step. */
guint16 rl_lock_sleep (RedisLock *lock, const RlAcquire *acq, GCancellable *cancellable);
/* TRUE with @error when a wait must end: the registry closed, or cancelled. */
gboolean rl_lock_wait_error (RedisLock *lock, GCancellable *cancellable, GError **error);

/* lock-async.c: redis_lock_unlock_async() with nobody waiting for the result: the
 * calling thread's hold is given back at once, and an outermost one's release (or
 * hand-off) goes on on the registry's workers, needing no main context; a failure is
 * only logged (debug). */
void rl_lock_unlock_background (RedisLock *lock);

/* lock.c's part of the queued waiters of lock-async.c. */

/* What rl_lock_take_or_queue() did. */
typedef enum
{
  RL_QUEUE_REENTERED, /* @thread held it already: one more hold */
  RL_QUEUE_OWNED,     /* free: @waiter owns it now, without a lease */
  RL_QUEUE_KEPT,      /* free: @waiter owns it now, with the lease handed over */
  RL_QUEUE_QUEUED,    /* busy: @waiter waits in the queue */
  RL_QUEUE_BUSY,      /* busy, and @may_queue was FALSE */
} RlQueueTake;

RlQueueTake rl_lock_take_or_queue (RedisLock *lock, gpointer thread, RlLockWaiter *waiter,
                                   gboolean may_queue);
/* Takes @waiter out of the queue. FALSE: it was granted the mutex meanwhile (its
 * granted() has been or is being called). */
gboolean rl_lock_leave_queue (RedisLock *lock, RlLockWaiter *waiter);
/* Has @waiter (the queued waiter that owns the mutex, or a waiter in no queue: a
 * semaphore's asynchronous acquisition) sleep until the notification number moves past
 * @seq (then poke()); FALSE, without sleeping, when it moved already or the registry
 * closed. Several waiters may sleep at once. */
gboolean rl_lock_sleep_queued (RedisLock *lock, RlLockWaiter *waiter, guint16 seq);
/* Ends the sleep of @waiter, if it sleeps. */
void rl_lock_wake_queued (RedisLock *lock, RlLockWaiter *waiter);
/* Hands the hold from owner @from to @to (a thread, or a waiter marker). */
void rl_lock_set_owner (RedisLock *lock, gpointer from, gpointer to);
/* The lease handed over with the mutex, if still good (else forgotten quietly). */
gboolean rl_lock_accept_kept_lease (RedisLock *lock);
/* Starts the lease phase of an acquisition of @lock, whose local mutex the caller owns,
 * ending at @deadline: the machine begins with the yield the last hold asked for, if
 * any (counted in the registry's stats), which the lock forgets. */
void rl_lock_begin_acquire (RedisLock *lock, RlAcquire *acq, gint64 deadline);
/* The machine's RL_ACQUIRE_ATTEMPT for @lock (the step of every single acquisition,
 * blocking or not): one request for the lease, reported to @acq. With @pubsub,
 * notifications are confirmed first if the machine wants them. With @bounded, the
 * request is also cut short at the deadline. The lease taken is in the table; a
 * failure leaves @error set, or unset when the wait ran out during the request (not
 * acquired in time). Returns what to do next. */
RlAcquireAction rl_lock_attempt_step (RedisLock *lock, RlAcquire *acq, gboolean pubsub,
                                      gboolean bounded, gint64 ttl_ms, const char *fence_key,
                                      GError **error);
/* The lease request of a member of the lock family (a read-write lock's reader or
 * writer lease): takes the lease of @lock (a member's lease carrier, see
 * RedisLock.member) with @value for @ttl_ms, by the monotonic @deadline (µs, 0: the
 * command timeout from now), answering as the store's acquire does (OK, HELD with *pttl_ms, ERROR). */
typedef struct
{
  RlLeaseResult (*func) (RedisLock *lock, const char *value, gint64 ttl_ms, gint64 deadline,
                         gint64 *pttl_ms, gpointer data, GError **error);
  gpointer data;
} RlLeaseRequest;

/* rl_lock_attempt_step() for a member's lease carrier @lock, whose lease @request takes
 * (an asynchronous acquisition of a read-write lock's lease). */
RlAcquireAction rl_lock_attempt_request_step (RedisLock *lock, RlAcquire *acq, gboolean pubsub,
                                              gboolean bounded, gint64 ttl_ms,
                                              const RlLeaseRequest *request, GError **error);
/* The lease phase of a blocking acquisition of @lock's lease by @request, on the one
 * acquisition machine as a plain lock's: attempts until taken (TRUE, the lease in the
 * table), @deadline (FALSE without @error), a failure, close or cancel (FALSE with
 * @error); sleeps on @lock's notification number between attempts (the caller wakes it
 * on cancel). @bounded as for rl_lock_attempt_step(). The caller keeps @lock's local
 * mutex out of it: a carrier's is never taken. */
gboolean rl_lock_acquire_lease (RedisLock *lock, gint64 deadline, gboolean bounded,
                                gint64 ttl_ms, const RlLeaseRequest *request,
                                GCancellable *cancellable, GError **error);
/* Releases @value, taken by an attempt after close() released the leases; sets CLOSED. */
void rl_lock_release_after_close (RedisLock *lock, const char *value, GError **error);

/* What the local part of an unlock left to do. */
typedef enum
{
  RL_UNLOCK_FAILED,    /* not the owner, or the registry is closed or forked: @error */
  RL_UNLOCK_INNER,     /* done: one hold less */
  RL_UNLOCK_OUTERMOST, /* the last hold: rl_lock_unlock_outermost(), or a release */
} RlUnlockStep;

RlUnlockStep rl_lock_unlock_local (RedisLock *lock, GError **error);
gboolean rl_lock_unlock_outermost (RedisLock *lock, GError **error);
/* Whether the outermost unlock of @lock would simply release its lease (nobody to hand
 * it to, nothing to keep), with the lease's view and the hand-off bound for the two
 * halves below; FALSE: rl_lock_unlock_outermost() it. */
gboolean rl_lock_plans_release (RedisLock *lock, RlLeaseView *view, guint *max);
/* A release in two halves around the store's answer, so that several can share one
 * request: the value and the lease dropped from the table (FALSE: close() released it,
 * the hold is over, @error says CLOSED); then, with the store's @result (OK, LOST or
 * ERROR with @store_error, taken), the hold ended and reported as redis_lock_unlock()
 * reports it. */
gboolean rl_lock_release_begin (RedisLock *lock, const RlLeaseView *view, guint max,
                                char value[RL_LEASE_VALUE_MAX], gboolean *lost, GError **error);
/* The store's release of @value, between the halves; @lost (from the first half): not
 * asked, RL_LEASE_ERROR without an error, so that the second half reports LEASE_LOST at
 * once and releases the key in the background. @keep_ttl_ms as for the store's
 * release. */
RlLeaseResult rl_lock_release_store (RedisLock *lock, const char *value, gboolean lost,
                                     gint64 keep_ttl_ms, gboolean *others, GError **error);
RlLeaseResult rl_lock_release_end (RedisLock *lock, const RlLeaseView *view, guint max,
                                   const char *value, gboolean lost, RlLeaseResult result,
                                   gboolean others, gint64 start_us, GError *store_error,
                                   GError **error);

#endif /* RL_INTERNAL_H */
