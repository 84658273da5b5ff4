/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-store.h: what the Redis store (redis-store.c) shares with the files that add
 * scripts of their own to it, so that the protocol of each member of the lock family
 * lives in a file of its own (redis-rwlock.c: the read-write lock's) while every
 * command still goes through the store's one exchange engine: routing by key (the
 * Cluster slot), MOVED/ASK, retries, NOSCRIPT, key tracking and WAIT for replicas.
 *
 * The calls go one way: a family file calls rl_redis_store_eval() and the rest below;
 * redis-store.c only names the family's functions in its vtable.
 */
#ifndef RL_REDIS_STORE_H
#define RL_REDIS_STORE_H

#include <glib.h>
#include <string.h>

#include "store.h"

struct redisReply;

/* A Lua script and its SHA-1, sent by EVALSHA (and by EVAL after NOSCRIPT). */
typedef struct
{
  const char *text;
  char sha[41];
} RlScript;

static inline void
rl_script_init (RlScript *script, const char *text)
{
  g_autofree char *sha = g_compute_checksum_for_string (G_CHECKSUM_SHA1, text, -1);

  script->text = text;
  memcpy (script->sha, sha, 40);
  script->sha[40] = '\0';
}

/* A lease script's reply that says the lease was taken (any other integer is the
 * remaining TTL of what holds it back). */
#define RL_SCRIPT_ACQUIRED (-3)

/* Runs @script with the command line @argv (argv[0..1] are filled in: EVALSHA and the
 * SHA-1, or EVAL and the text after NOSCRIPT; argv[2] the number of keys, argv[3] the
 * first key, which routes the call) on the node that serves argv[3], within
 * @timeout_ms (0: the command timeout). The keys it reads are tracked for a waiter, as
 * the acquire script's are. Returns the reply (freeReplyObject()), never an error
 * reply, or NULL with @error. When the reply is RL_SCRIPT_ACQUIRED and replicas must
 * acknowledge writes, *@acked tells whether enough did; otherwise it is TRUE. */
struct redisReply *rl_redis_store_eval (RlStore *store, const RlScript *script, int argc,
                                        const char **argv, gint64 timeout_ms, gboolean *acked,
                                        GError **error);
/* A lease (@key holding @value) too few replicas acknowledged: released again;
 * RL_LEASE_ERROR with NOT_REPLICATED. */
RlLeaseResult rl_redis_store_unreplicated (RlStore *store, const char *key, const char *value,
                                           GError **error);
/* The channel a release of @key is published on (g_free()). */
char *rl_redis_store_channel (RlStore *store, const char *key);

/* redis-rwlock.c: the read-write lock's entries of the vtable (see store.h). */
RlLeaseResult rl_redis_rw_acquire (RlStore *store, const RlRwKeys *keys, RlRwMode mode,
                                   const char *value, gint64 ttl_ms, gint64 timeout_ms,
                                   gint64 *pttl_ms, GError **error);
gboolean rl_redis_rw_stop_waiting (RlStore *store, const RlRwKeys *keys, GError **error);

#endif /* RL_REDIS_STORE_H */
