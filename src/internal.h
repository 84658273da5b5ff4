/* internal.h: the structures shared by registry.c, lock.c and watchdog.c.
 *
 * Locking order, which every file follows: registry->mutex (the cache) before
 * lock->m (one lock's local mutex state) before registry->lease_mutex (the held-lease
 * table and every lock's lease fields); registry->callback_mutex is taken alone.
 * Nothing that holds lock->m or lease_mutex calls the store, so no Redis round trip
 * ever happens under a mutex another thread may need.
 */
#ifndef RL_INTERNAL_H
#define RL_INTERNAL_H

#include <gio/gio.h>
#include <pthread.h>

#include "redislock/redislock.h"
#include "store.h"
#include "sync.h"

typedef struct _RlWatchdog RlWatchdog;

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

  /* Settings, read and written atomically. */
  gint64 expire_after_ms;
  gint64 idle_between_tries_ms;
  gint wait_mode;
  gint watchdog_enabled;
  guint max_local_handoffs;

  /* The lock cache. */
  RlMutex mutex;
  GHashTable *locks;   /* name -> RedisLock (the cache's reference) */
  RedisLock *lru_head; /* least recently obtained first */
  RedisLock *lru_tail;
  guint capacity;

  /* Held leases: RedisLock -> same, and the lease fields of every lock. */
  RlMutex lease_mutex;
  GHashTable *held;
  RlWatchdog *watchdog;
  GPtrArray *lost_pending; /* locks found lost outside the watchdog, for its callback */

  /* Lease-lost callback. */
  RlMutex callback_mutex;
  RedisLockLeaseLostFunc lost_func;
  gpointer lost_data;
  GDestroyNotify lost_destroy;
};

/* Condition variables of a lock, made when a thread first has to wait for it: most
 * cached locks are never contended, and a pair of pthread_cond_t is 96 bytes. */
typedef struct
{
  RlCond local;       /* owner became NULL, or the registry closed */
  RlCond notify;      /* notify_seq changed, cancelled, or the registry closed */
  gint64 yield_until; /* after a hand-off streak: first attempt not before this */
} RlLockWait;

/* Laid out small: an idle cached lock costs this struct, its key and a hash slot.
 * Fields guarded by different mutexes never share a memory location. */
struct _RedisLock
{
  gint ref_count;      /* atomic; memory only: the cache holds one while the lock is cached */
  guint user_refs;     /* registry->mutex; references handed out by obtain/ref */
  RedisLock *lru_prev; /* registry->mutex */
  RedisLock *lru_next; /* registry->mutex */
  gint64 last_used;    /* atomic, monotonic µs */
  RedisLockRegistry *registry;

  /* The local recursive mutex: lock->m guards these. */
  RlMutex m;
  RlLockWait *wait;   /* made by the first thread that waits */
  gpointer owner;     /* GThread of the holder, NULL when free */
  guint count;        /* the holder's hold count */
  guint waiters;      /* threads waiting for the local mutex */
  guint32 notify_seq; /* bumped when the store says the lease may have been released */
  guint32 handoffs;   /* local hand-offs in a row since the lease was taken */
  /* One byte of flags, all under lock->m (a bit-field shares its byte). */
  guint8 lease_kept : 1;  /* the lease stays for the next local owner (a local hand-off) */
  guint8 streak_kept : 1; /* a streak already ended with the lease kept (nobody else listened) */
  guint8 waking : 1;      /* a waiter was signalled and has not run yet */
  guint8 reserved : 1;    /* the mutex is free for a waiting thread only (see lock.c) */
  guint8 barged : 3;      /* holds in a row taken by threads that did not wait, others
                             waiting; saturates at RL_LOCAL_BARGE_MAX */

  guint8 cached; /* registry->mutex */

  /* The lease of the current hold: registry->lease_mutex guards these. */
  guint8 held;                     /* in registry->held */
  guint8 lost;                     /* found lost; stays so until the outermost unlock */
  guint32 lease_gen;               /* bumped at every acquisition, tells holds apart */
  gint64 lease_ttl_ms;             /* TTL the lease is renewed with */
  gint64 lease_confirmed;          /* monotonic µs when the last confirmed request was sent */
  GCancellable *lease_cancellable; /* made on demand, cancelled when lost */

  char key_data[]; /* one allocation for the struct and its key */
};

/* A lock's key, registry_key ":" name, is stored once, after the struct; its name is
 * the tail of it. (Two pointers into it would cost 16 bytes per cached lock.) */
static inline const char *
rl_lock_name (const RedisLock *lock)
{
  return lock->key_data + lock->registry->key_prefix_len;
}

/* registry.c */
gboolean rl_registry_check (RedisLockRegistry *registry, GError **error);
gboolean rl_registry_is_closed (RedisLockRegistry *registry);
gboolean rl_registry_lease_taken (RedisLockRegistry *registry, RedisLock *lock, gint64 ttl_ms,
                                  gint64 sent_us);
gboolean rl_registry_lease_drop (RedisLockRegistry *registry, RedisLock *lock, gboolean *lost);
/* The watchdog found @locks lost (their lost flag just set): cancel their lease
 * cancellables and call the callback. Watchdog thread only. */
void rl_registry_report_lost (RedisLockRegistry *registry, GPtrArray *locks);
/* Another thread found @lock lost (flag just set): cancels its lease cancellable now
 * and has the watchdog thread call the callback. */
void rl_registry_lost_found (RedisLockRegistry *registry, RedisLock *lock);
/* Calls the callback for the losses queued by rl_registry_lost_found(). */
void rl_registry_report_pending (RedisLockRegistry *registry);
gint64 rl_drift_margin_us (gint64 ttl_ms);
/* When an unconfirmed lease of @lock counts as lost: its last confirmed request plus
 * the TTL, less the margin. registry->lease_mutex held. */
gint64 rl_lease_lose_at (RedisLock *lock);
/* Marks the held lease of @lock lost if its time ran out unconfirmed, and tells the
 * holder. Returns whether it is lost. Takes registry->lease_mutex. */
gboolean rl_registry_check_lease_time (RedisLockRegistry *registry, RedisLock *lock);

/* lock.c */
RedisLock *rl_lock_new (RedisLockRegistry *registry, const char *name);
void rl_lock_release_memory (RedisLock *lock);
gboolean rl_lock_is_idle (RedisLock *lock);
void rl_lock_notify (RedisLock *lock);
void rl_lock_wake_all (RedisLock *lock);

/* watchdog.c */
RlWatchdog *rl_watchdog_new (RedisLockRegistry *registry);
void rl_watchdog_kick (RlWatchdog *watchdog);
/* A lease is due for renewal at @due_us: wakes the watchdog only if it planned to
 * sleep past that. registry->lease_mutex held. */
void rl_watchdog_schedule (RlWatchdog *watchdog, gint64 due_us);
void rl_watchdog_free (RlWatchdog *watchdog); /* stops and joins */

/* error.c */
extern guint rl_fork_generation;
void rl_fork_guard_init (void);

#endif /* RL_INTERNAL_H */
