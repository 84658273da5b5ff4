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
  gpointer write_owner;    /* GThread of the writer, NULL: none */
  guint write_count;       /* the writer's holds */
  guint writers_waiting;   /* threads waiting to write: new readers wait behind them */
  guint waiters;           /* threads inside a wait or a store request of the lock */
  RlRwLeaseState reader_lease;
  gboolean writer_marked; /* a writer of another registry may wait (its mark was heard
                             set): new reading threads do not join the reader lease held
                             now, but wait until it is given back and ask the store */
  guint mark_seq;         /* marks heard, so that a fresh lease forgets only the marks
                             its request saw */
};

/* rwlock.c */
RedisRWLock *rl_rw_lock_new (RedisLockRegistry *registry, const char *name);
void rl_rw_lock_free (RedisRWLock *lock);
/* redis_rw_lock_try_read_lock_for() and redis_rw_lock_try_write_lock_for() for the
 * hold of thread @owner (a GThread), which need not be the calling thread: an
 * asynchronous call (rwlock-async.c) takes the hold for the thread that made it. */
gboolean rl_rw_lock_read_as (RedisRWLock *lock, gpointer owner, gint64 wait_ms,
                             GCancellable *cancellable, GError **error);
gboolean rl_rw_lock_write_as (RedisRWLock *lock, gpointer owner, gint64 wait_ms,
                              GCancellable *cancellable, GError **error);
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
/* The name of the read-write lock whose key has @tail after `registry_key:`
 * (`{name}:rw:…`), or NULL (g_free()). */
char *rl_rw_lock_name_of_key (const char *tail);

#endif /* RL_RWLOCK_H */
