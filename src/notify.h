/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify.h: the Redis store's unlock-notification subscriber (see notify.c). */
#ifndef RL_NOTIFY_H
#define RL_NOTIFY_H

#include "connection.h"
#include "store.h"

typedef struct _RlNotifier RlNotifier;

/* Subscribes to @pattern on a connection of @pool from a thread of its own, started
 * on the first rl_notifier_watch(); calls store->released for each message. */
RlNotifier *rl_notifier_new (RlStore *store, RlPool *pool, const char *pattern);
gboolean rl_notifier_watch (RlNotifier *notifier, gint64 timeout_ms);
/* Whether the subscription is confirmed now; never starts it. */
gboolean rl_notifier_is_subscribed (RlNotifier *notifier);
void rl_notifier_stop (RlNotifier *notifier); /* joins the thread; idempotent */
void rl_notifier_free (RlNotifier *notifier);

#endif /* RL_NOTIFY_H */
