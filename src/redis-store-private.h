/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-store-private.h: what the Redis store's protocol files share.
 *
 * redis-store.c holds the exchange engine (routing, redirections, NOSCRIPT, stale
 * connections, WAIT for replicas) and the plain lease scripts; the scripts of the
 * other members of the lock family live in files of their own (redis-semaphore.c)
 * and reach the engine only through the two calls below, so that the engine stays
 * one copy and knows nothing of what their replies mean. redis-store.c refers to
 * their functions only from its vtable.
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

/* redis-semaphore.c: the store seam's semaphore entries (store.h). */
RlLeaseResult rl_redis_semaphore_acquire (RlStore *store, const char *sem_key, guint permits,
                                          guint start, const char *value, gint64 ttl_ms,
                                          gint64 timeout_ms, guint *slot, gint64 *pttl_ms,
                                          GError **error);
gboolean rl_redis_semaphore_available (RlStore *store, const char *sem_key, guint permits,
                                       guint *available, GError **error);

#endif /* RL_REDIS_STORE_PRIVATE_H */
