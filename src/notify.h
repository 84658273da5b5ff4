/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify.h: the Redis store's unlock-notification subscriber (see notify.c). */
#ifndef RL_NOTIFY_H
#define RL_NOTIFY_H

#include "connection.h"
#include "store.h"
#include "topology.h"

typedef struct _RlNotifier RlNotifier;

/* Subscribes to @guard_channel (forced releases: a holder must hear of them) on the
 * node @topology names for it, from a thread of its own started on the first
 * rl_notifier_guard() or rl_notifier_watch(), and to @pattern and @legacy_channel once
 * a waiter asks (rl_notifier_watch()); calls store->released for each message. A
 * message on @legacy_channel names a key: one starting with @key_prefix is handed on,
 * any other as "any key". With @track_prefix (NULL: none), also hears of the change of
 * a key a waiter read (Redis key tracking, see notify.c) and calls store->released for
 * each changed key. The names stay the caller's, and must outlive the notifier. */
RlNotifier *rl_notifier_new (RlStore *store, RlTopology *topology, const char *pattern,
                             const char *guard_channel, const char *legacy_channel,
                             const char *key_prefix, const char *track_prefix);
/* Drops the subscription and makes a new one at once, on the node the topology names
 * now (after a failover). */
void rl_notifier_restart (RlNotifier *notifier);
/* Asks for the pattern subscription (a waiter) and waits up to @timeout_ms for it to be
 * confirmed: TRUE when it is. */
gboolean rl_notifier_watch (RlNotifier *notifier, gint64 timeout_ms);
/* Starts the connection without asking for the pattern (a holder that nobody waits
 * for hears no releases, not even its own): it only notices breaks and restarts.
 * Returns FALSE while a connection that was up is down (a restart now would go
 * unnoticed until it is back), TRUE otherwise. */
gboolean rl_notifier_guard (RlNotifier *notifier);
/* How many receivers of a release published on the per-key channel (and, with
 * @legacy, on the legacy channel too) are this subscription: 0, 1 or 2. */
guint rl_notifier_receivers (RlNotifier *notifier, gboolean legacy);
/* While the subscription is confirmed with key tracking on: the client id a data
 * connection's key tracking must report to (CLIENT TRACKING on REDIRECT id); else 0. */
gint64 rl_notifier_tracking_id (RlNotifier *notifier);
void rl_notifier_stop (RlNotifier *notifier); /* joins the thread; idempotent */
void rl_notifier_free (RlNotifier *notifier);

#endif /* RL_NOTIFY_H */
