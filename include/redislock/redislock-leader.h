/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-leader.h: leader election on a lock, as Spring Integration's
 * LockRegistryLeaderInitiator.
 *
 * Candidates for one name in any number of processes each try to take the lock of that
 * name; the one that holds it leads until it stops, resigns, loses the lease or its
 * registry closes, and the others wait for the lock meanwhile, woken by its release.
 * Everything happens in a GMainContext: no thread is blocked for a candidate.
 */
#ifndef REDIS_LOCK_LEADER_H
#define REDIS_LOCK_LEADER_H

#if !defined(__REDIS_LOCK_H_INSIDE__) && !defined(REDIS_LOCK_COMPILATION)
#error "Only <redislock/redislock.h> can be included directly."
#endif

#include <gio/gio.h>
#include <redislock/redislock-macros.h>
#include <redislock/redislock-registry.h>

G_BEGIN_DECLS

/**
 * RedisLeader:
 *
 * A candidate for leadership of a name, reference counted. Its functions may be called
 * from any thread; its callback runs in the main context [method@Redislock.Leader.start] was
 * called in.
 *
 * Since: 0.1
 */
typedef struct _RedisLeader RedisLeader;

/**
 * RedisLeaderFunc:
 * @leader: the candidate
 * @leading: %TRUE: leadership was granted; %FALSE: it ended
 * @user_data: (closure): the data given to [ctor@Redislock.Leader.new]
 *
 * Called in the thread-default main context of [method@Redislock.Leader.start] with
 * @leading %TRUE when the candidate becomes leader, and with %FALSE exactly once when
 * that leadership ends (stop, resign, lease lost or run out, registry closed). With
 * %FALSE, the lock is still held when the leadership ended by stop or resign (it is
 * released right after the call returns), so work stopped in the callback never
 * overlaps the next leader's. A leadership whose lease was lost or ran out has ended
 * before this call: [method@Redislock.Leader.is_leading] and the cancellable told so in the
 * thread that found it (see [method@Redislock.Leader.is_leading]). It may call any function
 * of the leader.
 *
 * Since: 0.1
 */
typedef void (*RedisLeaderFunc) (RedisLeader *leader, gboolean leading,
                                     gpointer user_data);

/**
 * REDIS_LOCK_TYPE_LEADER:
 *
 * The #GType of #RedisLeader, a boxed type whose copy takes a reference.
 *
 * Since: 0.1
 */
#define REDIS_LOCK_TYPE_LEADER (redis_leader_get_type ())

/**
 * redis_leader_get_type:
 *
 * Returns: the #GType of #RedisLeader, %REDIS_LOCK_TYPE_LEADER.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GType redis_leader_get_type (void) G_GNUC_CONST;

/**
 * redis_leader_new:
 * @registry: a registry
 * @name: the name to lead, a lock name (its lock, [method@Redislock.LockRegistry.obtain] of
 *   @name, is what the leader holds)
 * @func: (scope notified) (closure user_data): called when leadership begins and ends
 * @user_data: data for @func
 * @destroy: (nullable): called with @user_data when the leader is freed
 *
 * Makes a candidate; nothing happens until [method@Redislock.Leader.start].
 *
 * Returns: (transfer full) (nullable): the candidate; %NULL (with a critical) for a
 *   bad name or a closed registry.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLeader *redis_leader_new (RedisLockRegistry *registry,
                                                          const char *name,
                                                          RedisLeaderFunc func,
                                                          gpointer user_data,
                                                          GDestroyNotify destroy);

/**
 * redis_leader_ref: (skip)
 * @leader: a candidate
 *
 * Takes a reference to the candidate. See [method@Redislock.Leader.unref].
 *
 * Returns: (transfer full): @leader, with one more reference.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 RedisLeader *redis_leader_ref (RedisLeader *leader);

/**
 * redis_leader_unref: (skip)
 * @leader: (transfer full) (nullable): a candidate
 *
 * Drops a reference. A started candidate keeps itself alive until it is stopped (or
 * its registry closes): call [method@Redislock.Leader.stop] first. A stopped one needs
 * nothing more of its main context: dropped (with its registry), it frees them once
 * its release is done, in the background, even if that context never runs again.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_leader_unref (RedisLeader *leader);

/**
 * redis_leader_start:
 * @leader: a candidate
 *
 * Starts competing for leadership, in the thread-default main context of the calling
 * thread, which must run it (the lock is held by this thread while it leads). Nothing
 * happens when it is started already.
 * See [method@Redislock.Leader.stop] and [Leader election](leader.html).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_leader_start (RedisLeader *leader);

/**
 * redis_leader_stop:
 * @leader: a candidate
 *
 * Stops competing: gives leadership up (the callback gets %FALSE, then the lock is
 * released) if it leads, or stops waiting for it. Called from the thread that runs the
 * leader's main context, it is done when it returns; from another thread, it is done
 * in that context soon after. The release of the lock is sent to Redis from a worker
 * thread of the registry, as [method@Redislock.Lock.unlock_async] does, but with nobody waiting
 * for its result: the context never waits for a server (which may be the one that
 * stopped answering), and the release completes in the background without the context
 * running again; a release the server does not answer in time is retried there, as a
 * failed unlock's is, and otherwise the key expires with its TTL.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_leader_stop (RedisLeader *leader);

/**
 * redis_leader_resign:
 * @leader: a candidate
 *
 * Gives leadership up now (as [method@Redislock.Leader.stop] does) and competes again after
 * the pause of [method@Redislock.Leader.set_pause_ms], so that another candidate may lead.
 * Nothing happens when it does not lead.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_leader_resign (RedisLeader *leader);

/**
 * redis_leader_set_pause_ms:
 * @leader: a candidate
 * @pause_ms: how long it waits before competing again after it resigned, lost its lease
 *   or failed to reach Redis; default 1000, must be >= 0
 *
 * Sets the pause before the candidate competes again. See [method@Redislock.Leader.resign].
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 void redis_leader_set_pause_ms (RedisLeader *leader, gint64 pause_ms);

/**
 * redis_leader_is_leading:
 * @leader: a candidate
 *
 * Tells whether the candidate leads now, and so may act as leader now: call it right
 * before each act. It answers %FALSE from the moment the lease's time has run out or
 * its loss is known, in whatever thread finds it, not when the leader's main context
 * next runs: the lease's time is the start of its last confirmed acquisition or
 * renewal plus its TTL, less the drift margin after which the registry counts an
 * unconfirmed lease lost, compared here with the monotonic clock, so a process paused
 * (or frozen) past its TTL answers %FALSE at once when it resumes, before any renewal
 * reply. A leadership found run out here ends here: its cancellable is cancelled in
 * this thread, and the callback gets %FALSE later in the leader's context.
 * See [Leader election](leader.html).
 *
 * Returns: whether it leads now (from the grant until the leadership ends, its lease
 *   is found lost or its time runs out, whichever comes first).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 gboolean redis_leader_is_leading (RedisLeader *leader);

/**
 * redis_leader_get_cancellable:
 * @leader: a candidate
 *
 * Gives the cancellable of the current leadership.
 *
 * Returns: (transfer none): a #GCancellable cancelled when the current leadership ends
 *   (already cancelled when it does not lead), to pass to the work done as leader. It
 *   is cancelled from the moment the lease's time has run out or its loss is known, in
 *   whatever thread finds it (the registry's watchdog or subscriber thread, or the
 *   caller of [method@Redislock.Leader.is_leading] or of this function, which check the
 *   lease's time as that one does), before the callback gets %FALSE in the leader's
 *   context: its handlers may run in any thread. Each leadership gets a new one, made
 *   when it is granted: the one returned stays valid until then (take a reference to
 *   keep it longer, or to use it from a thread other than the leader's).
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 GCancellable *redis_leader_get_cancellable (RedisLeader *leader);

/**
 * redis_leader_get_name:
 * @leader: a candidate
 *
 * Gives the name the candidate competes for. See [Leader election](leader.html).
 *
 * Returns: (transfer none): the name it competes for.
 *
 * Since: 0.1
 */
REDIS_LOCK_AVAILABLE_IN_0_1 const char *redis_leader_get_name (RedisLeader *leader);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (RedisLeader, redis_leader_unref)

G_END_DECLS

#endif /* REDIS_LOCK_LEADER_H */
