/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* leases.h: the lease table of a registry (see leases.c), the only writer of lease state.
 *
 * lock.c asks it to record a lease it took in the store, to forget one it released,
 * and what it knows of the current hold (lost, stale, its value, its cancellable);
 * registry.c creates, closes and frees it, and forwards the callback, renew and
 * settings calls. Everything about a lease after it was taken (renewal, loss,
 * reporting, the background release of acquisitions with an unknown outcome) happens
 * inside it.
 */
#ifndef RL_LEASES_H
#define RL_LEASES_H

#include <gio/gio.h>

#include "redislock/redislock.h"
#include "settings.h"
#include "store.h"

typedef struct _RlLeases RlLeases;

/* The lease fields of one lock, stored inline in the lock (an idle cached lock costs
 * its struct) in two parts, so the small ones fill what would be padding. Only
 * leases.c reads or writes them, under the table's mutex. */
typedef struct
{
  guint8 held : 1; /* in the held table */
  guint8 lost : 1; /* found lost; stays so until the outermost unlock */
  guint8 suspect : 1; /* in the table's suspects: its key was heard released */
  guint8 forced : 1;  /* its key was heard forced open: unconfirmed (its view says so)
                         until a read sent after the latest forced release heard finds
                         it still ours */
  guint8 pins : 4;    /* library threads that have the lock in hand (at most four: the
                         watchdog's batch, the queue of losses, the suspects, the close
                         sweep) */
} RlLeaseFlags;

typedef struct
{
  guint64 serial;            /* the acquisition's number, the tail of its value */
  gint64 ttl_ms;             /* TTL the lease is renewed with */
  gint64 confirmed;          /* monotonic µs when the last confirmed request was sent */
  guint64 token;             /* fencing token the lease was taken with; 0: none */
  GCancellable *cancellable; /* made on demand, cancelled when lost */
} RlLeaseState;

/* What a hold's outermost unlock needs to know of its lease, read at once. */
typedef struct
{
  gboolean held; /* in the table (FALSE: close() released it) */
  gboolean lost; /* found lost */
  guint64 serial;
  gint64 ttl_ms;
  guint64 token;  /* fencing token, 0: none */
  gint64 lose_at; /* monotonic µs when an unconfirmed lease counts as lost */
  gboolean unconfirmed; /* last confirmed before the latest connection loss, reconnect
                           or failover, or its key forced open since, or the store's
                           guard is down now: the store may have lost it since */
} RlLeaseView;

RlLeases *rl_leases_new (RlStore *store, const char *client_id, const RlSettings *settings,
                         RedisLockRegistryStats *stats);
/* Stops the watchdog (losses found before still get their callback, from this thread),
 * releases every held lease, best effort, telling its holder as for a lost lease (no
 * callback), and makes a last try at the doubtful releases. Later rl_leases_take()
 * calls are refused. */
void rl_leases_close (RlLeases *leases);
void rl_leases_free (RlLeases *leases);

/* A new acquisition number, and the value a hold with @serial stores. */
guint64 rl_leases_next_serial (RlLeases *leases);
void rl_leases_value (RlLeases *leases, guint64 serial, char value[RL_LEASE_VALUE_MAX]);

/* Records the lease of @lock, just taken (or kept) in the store by a request sent at
 * @sent_us, with its fencing @token (0: none). Returns FALSE, recording nothing, once
 * the table is closed: the lease is the caller's to release. */
gboolean rl_leases_take (RlLeases *leases, RedisLock *lock, guint64 serial, gint64 ttl_ms,
                         gint64 sent_us, guint64 token);
/* Forgets the lease of @lock at its outermost unlock. Returns FALSE when it was no
 * longer in the table (close released it). *lost tells whether it had been found lost. */
gboolean rl_leases_drop (RlLeases *leases, RedisLock *lock, gboolean *lost);
/* The outcome of acquiring or releasing @key with @value is unknown: released in the
 * background until it is gone or its @ttl_ms has run out. */
void rl_leases_add_doubtful (RlLeases *leases, const char *key, const char *value, gint64 ttl_ms);

/* Calls @func for each lease in the table that is not known lost, with its value, under
 * the table's mutex: @func must not call into the table, nor take a lock's mutex. */
typedef void (*RlLeasesHeldFunc) (RedisLock *lock, const char *value, gpointer user_data);
void rl_leases_foreach_held (RlLeases *leases, RlLeasesHeldFunc func, gpointer user_data);

RlLeaseView rl_leases_view (RlLeases *leases, RedisLock *lock);
/* Marks the held lease of @lock lost if its time ran out unconfirmed, and reports it.
 * Returns whether it is lost. */
gboolean rl_leases_check_time (RlLeases *leases, RedisLock *lock);
/* Until when (monotonic µs) the held lease of @lock counts as good: the start of its
 * last confirmed request plus its TTL, less the drift margin (where
 * rl_leases_check_time() finds it lost); 0 when it is not held or was found lost. */
gint64 rl_leases_good_until (RlLeases *leases, RedisLock *lock);
/* Renews the held lease of @lock with its own TTL (before a hand-off with the watchdog
 * off): TRUE when confirmed. */
gboolean rl_leases_refresh (RlLeases *leases, RedisLock *lock);
/* Drops a cancelled lease cancellable: it belonged to a hold that has ended. */
void rl_leases_forget_cancelled (RlLeases *leases, RedisLock *lock);
gboolean rl_leases_is_lost (RlLeases *leases, RedisLock *lock);
/* The fencing token of the held lease of @lock; 0 when it has none or is not held. It
 * stays the lease's through hand-offs and kept streaks, and goes with it. */
guint64 rl_leases_get_token (RlLeases *leases, RedisLock *lock);
/* The lease cancellable of the current hold, made on demand; cancelled when lost. */
GCancellable *rl_leases_get_cancellable (RlLeases *leases, RedisLock *lock);
/* Whether a library thread has the lock in hand: the cache must not drop it. */
gboolean rl_leases_is_pinned (RlLeases *leases, RedisLock *lock);
/* redis_lock_registry_renew() of a lock of this registry. */
gboolean rl_leases_renew (RlLeases *leases, RedisLock *lock, const char *name, gint64 ttl_ms,
                          GError **error);

/* The store's connection broke or came back, or its deployment failed over: a new
 * epoch starts. Every held lease is checked at once (on the watchdog thread, started
 * for it even with renewal off), and until a lease is confirmed again its view says
 * unconfirmed, so that it is not handed to another thread unchecked. */
void rl_leases_audit (RlLeases *leases);
/* A release of @lock's key was heard while this registry holds its lease: the lease is
 * read back soon (GET on the watchdog thread, no renewal), at most a few times a
 * second; gone or another owner's, it is lost. */
void rl_leases_check_soon (RlLeases *leases, RedisLock *lock);
/* Someone forced @key open (the store heard it on the forced-release channel, so it is
 * no echo of a release of ours): every lease held under @key (a lock's, a permit's, a
 * read-write lock's) is read back at once on the watchdog thread, told when gone, and
 * until it is confirmed again its view says unconfirmed, so that an unlock confirms it
 * before handing it to another thread (one round trip, as after a reset). */
void rl_leases_forced (RlLeases *leases, const char *key);
/* The watchdog setting changed. */
void rl_leases_settings_changed (RlLeases *leases);
void rl_leases_set_callback (RlLeases *leases, RedisLockLeaseLostFunc func, gpointer user_data,
                             GDestroyNotify destroy);

#endif /* RL_LEASES_H */
