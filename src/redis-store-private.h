/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-store-private.h: what the Redis store's protocol files share.
 *
 * redis-store.c holds the exchange engine (routing by key and Cluster slot,
 * MOVED/ASK, retries, NOSCRIPT, stale connections, key tracking, WAIT for replicas)
 * and the plain lease scripts; the scripts of the other members of the lock family
 * live in files of their own (redis-semaphore.c, redis-rwlock.c) and reach the engine
 * only through the calls below, so that the engine stays one copy and knows nothing
 * of what their replies mean. The calls go one way: redis-store.c refers to the
 * family's functions only from its vtable.
 */
#ifndef RL_REDIS_STORE_PRIVATE_H
#define RL_REDIS_STORE_PRIVATE_H

#include <hiredis/hiredis.h>

#include "store.h"

/* A Lua script: its text and the SHA-1 that EVALSHA names it by. */
typedef struct
{
  const char *text;
  char sha[41];
} RlScript;

/* Whether a reply is a write that replicas must acknowledge (WAIT). */
typedef gboolean (*RlWroteFunc) (const redisReply *reply);

void rl_redis_script_init (RlScript *script, const char *text);

/* Sends @argv (argv[0..1] are EVALSHA and the SHA-1 of @script when it is not NULL) to
 * the node serving @key and returns the reply, NULL with @error on failure or an error
 * reply, within @timeout_ms (0: the command timeout). With @wrote, *@acked tells
 * whether enough replicas acknowledged a write; with @track, the keys the command
 * reads are tracked for the registry's waiters (see redis-store.c's call_tracked()). */
redisReply *rl_redis_store_call (RlStore *store, const char *key, int argc, const char **argv,
                                 const RlScript *script, gint64 timeout_ms, RlWroteFunc wrote,
                                 gboolean *acked, gboolean track, GError **error);
/* Sets NOT_REPLICATED for the @what ("acquisition") of @key. */
void rl_redis_store_not_replicated (RlStore *store, const char *what, const char *key,
                                    GError **error);

/* A lease script's reply that says the lease was taken (any other integer is the
 * remaining TTL of what holds it back). */
#define RL_SCRIPT_ACQUIRED (-3)

/* rl_redis_store_call() for a lease script whose first key (argv[3]) routes it and
 * whose reads are tracked for a waiter, as the acquire script's are: the reply
 * (freeReplyObject()), never an error reply, or NULL with @error. When the reply is
 * RL_SCRIPT_ACQUIRED and replicas must acknowledge writes, *@acked tells whether
 * enough did; otherwise it is TRUE. */
redisReply *rl_redis_store_eval (RlStore *store, const RlScript *script, int argc,
                                 const char **argv, gint64 timeout_ms, gboolean *acked,
                                 GError **error);
/* A lease (@key holding @value) too few replicas acknowledged: released again;
 * RL_LEASE_ERROR with NOT_REPLICATED. */
RlLeaseResult rl_redis_store_unreplicated (RlStore *store, const char *key, const char *value,
                                           GError **error);
/* The channel a release of @key is published on (g_free()). */
char *rl_redis_store_channel (RlStore *store, const char *key);

/* redis-semaphore.c: the store seam's semaphore entries (store.h). */
RlLeaseResult rl_redis_semaphore_acquire (RlStore *store, const char *sem_key, guint permits,
                                          guint start, const char *value, gint64 ttl_ms,
                                          gint64 timeout_ms, guint *slot, gint64 *pttl_ms,
                                          GError **error);
gboolean rl_redis_semaphore_available (RlStore *store, const char *sem_key, guint permits,
                                       guint *available, GError **error);

/* redis-rwlock.c: the read-write lock's entries of the vtable (store.h). */
RlLeaseResult rl_redis_rw_acquire (RlStore *store, const RlRwKeys *keys, RlRwMode mode,
                                   const char *value, gint64 ttl_ms, gint64 timeout_ms,
                                   gint64 *pttl_ms, GError **error);
gboolean rl_redis_rw_stop_waiting (RlStore *store, const RlRwKeys *keys, GError **error);

#endif /* RL_REDIS_STORE_PRIVATE_H */
