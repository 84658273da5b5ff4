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
 * rl_notifier_guard() or rl_notifier_watch(), and to @pattern once a waiter asks
 * (rl_notifier_watch()); calls store->released for each message. With @track_prefix (NULL: none), also hears of every change of a key
 * starting with it (Redis key tracking, see notify.c) and calls store->released for
 * each changed key. */
RlNotifier *rl_notifier_new (RlStore *store, RlTopology *topology, const char *pattern,
                             const char *guard_channel, const char *track_prefix);
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
/* Whether the subscription is confirmed now; never starts it. */
gboolean rl_notifier_is_subscribed (RlNotifier *notifier);
void rl_notifier_stop (RlNotifier *notifier); /* joins the thread; idempotent */
void rl_notifier_free (RlNotifier *notifier);

#endif /* RL_NOTIFY_H */
