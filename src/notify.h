/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify.h: the Redis store's unlock-notification subscriber (see notify.c). */
#ifndef RL_NOTIFY_H
#define RL_NOTIFY_H

#include "connection.h"
#include "store.h"
#include "topology.h"

typedef struct _RlNotifier RlNotifier;

/* Subscribes to @pattern on the node @topology names for it, from a thread of its
 * own started on the first rl_notifier_watch(); calls store->released for each
 * message. With @track_prefix (NULL: none), also hears of every change of a key
 * starting with it (Redis key tracking, see notify.c) and calls store->released for
 * each changed key. */
RlNotifier *rl_notifier_new (RlStore *store, RlTopology *topology, const char *pattern,
                             const char *track_prefix);
/* Drops the subscription and makes a new one at once, on the node the topology names
 * now (after a failover). */
void rl_notifier_restart (RlNotifier *notifier);
gboolean rl_notifier_watch (RlNotifier *notifier, gint64 timeout_ms);
/* Whether the subscription is confirmed now; never starts it. */
gboolean rl_notifier_is_subscribed (RlNotifier *notifier);
void rl_notifier_stop (RlNotifier *notifier); /* joins the thread; idempotent */
void rl_notifier_free (RlNotifier *notifier);

#endif /* RL_NOTIFY_H */
