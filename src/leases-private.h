/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* leases-private.h: what the lease table's two files share: the table itself
 * (struct _RlLeases, whose rules are at the top of leases.c), the lease-lost callback,
 * and the reporting of losses in leases-lost.c.
 */
#ifndef RL_LEASES_PRIVATE_H
#define RL_LEASES_PRIVATE_H

#include "internal.h"
#include "leases.h"
#include "watchdog.h"

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

struct _RlLeases
{
  RlStore *store;
  char *client_id;
  const RlSettings *settings;
  RedisLockRegistryStats *stats;
  guint64 next_serial; /* atomic */

  RlMutex renew_mutex; /* held across every renewal request, taken before mutex */

  RlMutex mutex;           /* guards what follows and every lock's RlLeaseState */
  GHashTable *held;        /* RedisLock -> same */
  RlWatchdog *watchdog;    /* started on first need */
  gint64 planned;          /* when the watchdog means to wake next */
  GPtrArray *lost_pending; /* pinned locks found lost outside the watchdog */
  GArray *doubtful;        /* Doubtful */
  GPtrArray *suspects;     /* pinned held locks whose key was heard released: each is
                              read back (GET) at check_at */
  gint64 check_at;         /* when the suspects are checked, 0: none due */
  gint64 checked_at;       /* when they were last checked */
  gint64 forced_at;        /* monotonic µs when a forced release of a held key was last
                              heard (0: never): a read sent before it confirms none */
  gint64 epoch_at;         /* monotonic µs of the latest connection loss, reconnect or
                              failover the store reported (0: none): a lease last
                              confirmed by a request sent before it may have gone with a
                              restart, so it is confirmed again before it is handed on */
  gboolean closed;

  RlMutex callback_mutex;
  RlLostCallback *callback; /* NULL: none */
};

/* leases-lost.c: reporting lost leases, and the lease-lost callback. */
void rl_leases_callback_unref (RlLostCallback *callback);
void rl_leases_cancel_lease (RlLeases *self, RedisLock *lock);
void rl_leases_call_callback (RlLeases *self, RedisLock *lock);
void rl_leases_pin (RedisLock *lock);
void rl_leases_unpin_locked (RlLeases *self, RedisLock *lock);
void rl_leases_unpin (RlLeases *self, RedisLock *lock);
void rl_leases_unref_unpinned (GPtrArray *locks);
void rl_leases_report_lost (RlLeases *self, GPtrArray *lost);
void rl_leases_report_pending (RlLeases *self);

#endif /* RL_LEASES_PRIVATE_H */
