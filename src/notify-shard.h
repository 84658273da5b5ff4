/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* notify-shard.h: a Cluster registry's sharded unlock-notification subscriber (see
 * notify-shard.c). */
#ifndef RL_NOTIFY_SHARD_H
#define RL_NOTIFY_SHARD_H

#include "store.h"
#include "topology.h"

typedef struct _RlShardNotifier RlShardNotifier;

/* Subscribes, from a thread of its own started on the first rl_shard_notifier_watch(),
 * to the shard channel (rl_cluster_shard_channel() of @channel_prefix and the key) of
 * each key a waiter waits for, on the master @topology routes the key to, and calls
 * store->released for each message, and with the key when its subscription ended
 * (the slot moved, the master failed or was replaced, nobody asked for it a while).
 * @channel_prefix stays the caller's, and must outlive the notifier. */
RlShardNotifier *rl_shard_notifier_new (RlStore *store, RlTopology *topology,
                                        const char *channel_prefix);
/* Asks for the subscription of @key (a waiter) and waits up to @timeout_ms for it to
 * be confirmed: TRUE when it is. FALSE at once, with *@refused TRUE, while the cluster
 * refuses shard channels (no SSUBSCRIBE before Redis 7, or a user without the
 * permission). With @join, the caller counts as a waiter of @key from now on, until
 * rl_shard_notifier_unwatch(): the key stays subscribed while it has waiters, and is
 * unsubscribed as soon as the last one left. */
gboolean rl_shard_notifier_watch (RlShardNotifier *notifier, const char *key, gboolean join,
                                  gint64 timeout_ms, gboolean *refused);
/* A waiter of @key that joined left (its acquisition ended). */
void rl_shard_notifier_unwatch (RlShardNotifier *notifier, const char *key);
/* The deployment changed shape: every subscription whose key another master serves
 * now moves there (its waiters are woken). */
void rl_shard_notifier_restart (RlShardNotifier *notifier);
void rl_shard_notifier_stop (RlShardNotifier *notifier); /* joins the thread; idempotent */
void rl_shard_notifier_free (RlShardNotifier *notifier);

#endif /* RL_NOTIFY_SHARD_H */
