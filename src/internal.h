/* internal.h: the structures shared by registry.c, lock.c and watchdog.c.
 *
 * Locking order, which every file follows: registry->mutex (the cache) before
 * lock->m (one lock's local mutex state) before registry->lease_mutex (the held-lease
 * table and every lock's lease fields); registry->callback_mutex is taken alone, and
 * the user's callback is called with no mutex held. Nothing that holds lock->m or
 * lease_mutex calls the store, so no Redis round trip ever happens under a mutex a
 * lock or unlock may need. The one mutex held across a store call is
 * registry->renew_mutex, taken before any other: it makes renewals of one registry
 * (the watchdog's batch, redis_lock_registry_renew(), the renewal before a hand-off
 * with the watchdog off) one at a time, so the TTL the registry records for a lease
 * is always the TTL of the last renewal Redis applied.
 */
#ifndef RL_INTERNAL_H
#define RL_INTERNAL_H

#include <gio/gio.h>
#include <pthread.h>

#include "redislock/redislock.h"
#include "store.h"
#include "sync.h"

typedef struct _RlWatchdog RlWatchdog;

/* The lease-lost callback, reference counted so it can be called with no mutex held
 * and replaced meanwhile (even from inside itself): destroy (data) runs when the last
 * call in flight returns. */
typedef struct
{
  gint ref_count; /* atomic */
  RedisLockLeaseLostFunc func;
  gpointer data;
  GDestroyNotify destroy;
} RlLostCallback;

/* An acquisition whose outcome is unknown (its reply timed out): its value may be in
 * the store, where nobody would release it. The watchdog releases it (compare-and-
 * delete on that value, which can never touch another hold) until it is gone or
 * @until_us, when its TTL has run out anyway. */
typedef struct
{
  char *key;
  char *value;
  gint64 until_us;
} RlDoubtful;

struct _RedisLockRegistry
{
  gint ref_count; /* atomic */
  gint closed;    /* atomic */
  guint fork_generation;
  char *registry_key;
  gsize key_prefix_len; /* strlen (registry_key) + 1: where a name starts in its lock key */
  char *client_id;
  guint64 next_serial; /* atomic: the number that makes each acquisition's value unique */
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
  GArray *doubtful;        /* RlDoubtful, for the watchdog to release */

  RlMutex renew_mutex; /* held across every renewal request (see above) */

  /* Lease-lost callback. */
  RlMutex callback_mutex;
  RlLostCallback *lost_callback; /* NULL: none */
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
  guint64 lease_serial;            /* the acquisition's number, the tail of its value:
                                      tells holds apart */
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

/* Longest lease TTL accepted (about 100 years): microsecond arithmetic on it cannot
 * overflow, and Redis accepts it as a PX argument. */
#define RL_TTL_MAX_MS ((gint64) 100 * 365 * 24 * 3600 * 1000)

/* @now_us + @ms milliseconds, saturated at RL_FOREVER; @ms < 0 is RL_FOREVER too. */
static inline gint64
rl_deadline_after (gint64 now_us, gint64 ms)
{
  if (ms < 0 || ms >= (RL_FOREVER - now_us) / 1000)
    return RL_FOREVER;
  return now_us + ms * 1000;
}

/* registry.c */
gboolean rl_registry_check (RedisLockRegistry *registry, GError **error);
gboolean rl_registry_is_closed (RedisLockRegistry *registry);
gboolean rl_registry_is_forked (RedisLockRegistry *registry);
/* A new acquisition number for this registry. */
guint64 rl_registry_next_serial (RedisLockRegistry *registry);
/* Writes the value a hold with @serial stores: client id ":" serial. */
void rl_registry_lease_value (RedisLockRegistry *registry, guint64 serial,
                              char value[RL_LEASE_VALUE_MAX]);
/* The outcome of acquiring @key with @value is unknown: have the watchdog release it. */
void rl_registry_add_doubtful (RedisLockRegistry *registry, const char *key, const char *value,
                               gint64 ttl_ms);
/* Releases the doubtful acquisitions; returns how many remain. Watchdog thread only. */
guint rl_registry_release_doubtful (RedisLockRegistry *registry);
gboolean rl_registry_lease_taken (RedisLockRegistry *registry, RedisLock *lock, guint64 serial,
                                  gint64 ttl_ms, gint64 sent_us);
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
/* Whether the held lease of @lock is lost or its time ran out unconfirmed, without
 * marking or reporting anything (a lease handed over that nobody holds yet). */
gboolean rl_registry_lease_is_stale (RedisLockRegistry *registry, RedisLock *lock);

/* lock.c */
RedisLock *rl_lock_new (RedisLockRegistry *registry, const char *name);
void rl_lock_release_memory (RedisLock *lock);
gboolean rl_lock_is_idle (RedisLock *lock);
void rl_lock_notify (RedisLock *lock);
void rl_lock_wake_all (RedisLock *lock);

/* watchdog.c */
RlWatchdog *rl_watchdog_new (RedisLockRegistry *registry);
void rl_watchdog_kick (RlWatchdog *watchdog);
/* Renews every lease at once (the store may have lost them: its connection broke). */
void rl_watchdog_tick_now (RlWatchdog *watchdog);
/* A lease is due for renewal at @due_us: wakes the watchdog only if it planned to
 * sleep past that. registry->lease_mutex held. */
void rl_watchdog_schedule (RlWatchdog *watchdog, gint64 due_us);
void rl_watchdog_free (RlWatchdog *watchdog); /* stops and joins */

/* error.c */
extern guint rl_fork_generation;
void rl_fork_guard_init (void);

#endif /* RL_INTERNAL_H */
