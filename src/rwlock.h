/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* rwlock.h: the read-write lock's structure, shared by rwlock.c (its local level and
 * its leases) and registry.c (the cache of read-write locks by name, and the wake-ups
 * the store's release notifications turn into).
 *
 * Each field has one writer, named beside it. Locking order: registry->cache_mutex
 * before rw->m before a carrier's lock->m and the lease table's mutex; no store call
 * is made with rw->m held.
 */
#ifndef RL_RWLOCK_H
#define RL_RWLOCK_H

#include "internal.h"
#include "waits.h"

/* The registry's reader lease, as the local level sees it. */
typedef enum
{
  RL_RW_LEASE_NONE,      /* not held */
  RL_RW_LEASE_ACQUIRING, /* a reading thread asks the store for it; the others wait */
  RL_RW_LEASE_HELD,      /* held: reading threads share it */
  RL_RW_LEASE_RELEASING, /* the last reading thread gives it back */
} RlRwLeaseState;

struct _RedisRWLock
{
  guint user_refs; /* registry->cache_mutex: references handed out */
  RedisLockRegistry *registry;
  char *name;

  /* Set at creation, read-only after. Each lease lives in the lease table through a
   * carrier, a RedisLock made for it (member set, never cached), so that renewal,
   * loss and audits are the plain lock's. */
  RedisLock *writer; /* the writer lease: registry_key:{name}:rw:w */
  RedisLock *reader; /* this registry's reader lease: registry_key:{name}:rw:r:CLIENT_ID */
  char *waiting_key, *readers_key, *reader_prefix;
  RlRwKeys keys;

  /* The local level: rw->m guards these (rwlock.c). */
  RlMutex m;
  RlCond cond;             /* the state below changed, closed or cancelled */
  GHashTable *reads;       /* GThread -> its read holds (GUINT_TO_POINTER) */
  gpointer write_owner;    /* GThread of the writer (an asynchronous call's RlRwCall until
                              its lease is taken), NULL: none */
  guint write_count;       /* the writer's holds */
  guint writers_waiting;   /* threads and calls waiting to write: new readers wait behind
                              them */
  guint waiters;           /* threads and asynchronous calls inside a wait or a store
                              request of the lock */
  RlRwLeaseState reader_lease;
  gboolean writer_marked; /* a writer of another registry may wait (its mark was heard
                             set, or notifications may have been missed): new reading
                             threads do not join the reader lease held now, but wait
                             until it is given back and ask the store */
  guint mark_seq;         /* marks heard, so that a fresh lease forgets only the marks
                             its request saw */
  GQueue queued;          /* RlLockWaiter (by their link): asynchronous calls waiting at
                             the local level (rwlock-async.c), poked whenever the state
                             above changes, as the threads are signalled */
};

/* One acquisition of a hold, blocking or asynchronous, through the local level to the
 * store. Set up by rl_rw_lock_enter(); the caller's own. */
typedef struct
{
  RedisRWLock *lock;
  RlRwMode mode;         /* RL_RW_READ or RL_RW_WRITE */
  gpointer owner;        /* the GThread the hold is for */
  gint64 deadline;       /* monotonic µs: the local wait and the store's together */
  gboolean bounded;      /* wait_ms != 0 */
  gint64 ttl_ms;
  guint seq;             /* READ: the marks heard when it asked the store */
  gint confirmed;        /* READ: the answer of the confirmation asked for: -1 none asked,
                            0 not confirmed, 1 confirmed */
  gboolean async;        /* an asynchronous call: a writer holds the local level under the
                            call's marker (the RlRwCall) until its lease is taken */
  RlLockWaiter *waiter;  /* an asynchronous call's, queued while it waits; NULL: none */
} RlRwCall;

/* What the local level says to a call. */
typedef enum
{
  RL_RW_LOCAL_TAKEN,   /* the hold is the owner's: no store request */
  RL_RW_LOCAL_WAIT,    /* not yet: wait for the local state to change */
  RL_RW_LOCAL_CONFIRM, /* READ: confirm the reader lease held now (rl_rw_lock_confirm(),
                          no mutex held), then look again */
  RL_RW_LOCAL_LEASE,   /* the call takes the lease from the store now, then
                          rl_rw_lock_lease_end() */
  RL_RW_LOCAL_ENDED,   /* gave up (closed, cancelled, the deadline): counted out */
} RlRwLocal;

/* rwlock.c */
RedisRWLock *rl_rw_lock_new (RedisLockRegistry *registry, const char *name);
void rl_rw_lock_free (RedisRWLock *lock);
/* The start of an acquisition of a @mode hold for thread @owner (a GThread, which need
 * not be the calling thread: an asynchronous call takes the hold for the thread that
 * made it): FALSE with @error when it may not start (closed, cancelled, a quorum
 * registry, an upgrade); TRUE with *@taken when it is a re-entry (no wait); TRUE
 * otherwise, @call counted among the lock's waiters until its end. */
gboolean rl_rw_lock_enter (RlRwCall *call, RedisRWLock *lock, RlRwMode mode, gpointer owner,
                           gint64 wait_ms, GCancellable *cancellable, gboolean *taken,
                           GError **error);
/* The local level's step for an asynchronous call, whose @waiter is queued while it
 * waits; @may_wait: FALSE when it must end rather than wait. */
RlRwLocal rl_rw_lock_local_async (RlRwCall *call, RlLockWaiter *waiter, gboolean may_wait);
/* Counts @call out without a hold (an asynchronous call that could not start its wait). */
void rl_rw_lock_leave (RlRwCall *call);
/* RL_RW_LOCAL_CONFIRM's request (blocks for a round trip). */
void rl_rw_lock_confirm (RlRwCall *call);
/* The carrier whose lease @call takes (its notification number is the one to sleep
 * on). */
RedisLock *rl_rw_lock_carrier (RlRwCall *call);
/* The machine's RL_ACQUIRE_ATTEMPT for @call's lease, as rl_lock_attempt_step() (a
 * reader's first attempt confirms notifications first). */
RlAcquireAction rl_rw_lock_attempt_step (RlRwCall *call, RlAcquire *acq, gboolean pubsub,
                                         gboolean bounded, GError **error);
/* A writer's acquisition failed: its waiting mark goes now, not at its TTL (blocks for a
 * round trip, within the call's wait or just past it; a mark the store did not remove
 * by then is removed in the background; nothing when the registry closed). */
void rl_rw_lock_stop_waiting (RlRwCall *call);
/* The end of a call that took RL_RW_LOCAL_LEASE: the lease is @ok (the hold the
 * owner's) or not. */
void rl_rw_lock_lease_end (RlRwCall *call, gboolean ok);
/* Whether the cache may drop @lock (no reference aside): nobody reads, writes or waits,
 * and the lease table has pinned neither carrier. registry->cache_mutex held. */
gboolean rl_rw_lock_is_idle (RedisRWLock *lock);
/* A release of @key, one of @lock's keys (NULL: any), may have happened: wakes the
 * waiters of both leases; a held lease whose key it is is checked soon. */
void rl_rw_lock_notify (RedisRWLock *lock, const char *key);
/* Wakes every waiter (close, cancel). */
void rl_rw_lock_wake_all (RedisRWLock *lock);
/* FALSE with INVALID when the keys of @name on @registry would not share a Cluster
 * slot (an empty hash tag). */
gboolean rl_rw_lock_check_name (RedisLockRegistry *registry, const char *name, GError **error);

/* Ending a hold, in two parts: the local one in the thread whose hold ends, and the
 * release of a lease, which blocks on the store (for an asynchronous unlock, on a
 * worker: rwlock-async.c). */
typedef enum
{
  RL_RW_UNLOCK_DONE,    /* ended without a release: the unlock succeeded */
  RL_RW_UNLOCK_FAILED,  /* with the error: as the blocking unlock reports it */
  RL_RW_UNLOCK_RELEASE, /* the lease is to be released: the matching _release() */
} RlRwUnlock;

/* The local part of redis_rw_lock_read_unlock() for @self's hold. */
RlRwUnlock rl_rw_lock_read_unlock_begin (RedisRWLock *lock, gpointer self, GError **error);
/* The reader lease's release (RL_RW_UNLOCK_RELEASE): the unlock's outcome. */
gboolean rl_rw_lock_read_unlock_release (RedisRWLock *lock, GError **error);
/* The local part of redis_rw_lock_write_unlock() for @self's hold; *@reading: the
 * thread also reads (a downgrade). With a @marker (an asynchronous unlock), the
 * outermost hold passes to it until the release ends, and a downgrade is refused
 * (INVALID: nothing changes). */
RlRwUnlock rl_rw_lock_write_unlock_begin (RedisRWLock *lock, gpointer self, gpointer marker,
                                          gboolean *reading, GError **error);
/* The writer lease's release, after the downgrade when @reading. */
gboolean rl_rw_lock_write_unlock_release (RedisRWLock *lock, gpointer self, gboolean reading,
                                          GError **error);

/* rl_lock_acquire_lease() whose wait, when it lasts, is recorded and checked for
 * deadlocks through @waiting (lock.c). */
gboolean rl_lock_acquire_lease_waiting (RedisLock *lock, gint64 deadline, gboolean bounded,
                                        gint64 ttl_ms, const RlLeaseRequest *request,
                                        GCancellable *cancellable, RlWaiting *waiting,
                                        GError **error);

#endif /* RL_RWLOCK_H */
