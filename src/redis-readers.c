/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-readers.c: a read-write lock's reader lease as the Redis store's lease code sees
 * it: which keys are reader leases, the script that renews one (checking and moving its
 * registration in the lock's readers index), and whether one is still registered.
 *
 * A reader lease `registry_key:{name}:rw:r:CLIENT_ID` is held only while its
 * registration (CLIENT_ID in the sorted set `registry_key:{name}:rw:readers`, scored
 * by when it runs out) is there: a writer finds readers through the index alone, and
 * nothing in Redis is safe from a DEL or an eviction. The lease code below the
 * read-write lock's protocol (redis-lease.c's renewal, redis-batch.c's watchdog batch,
 * redis-inspect.c's inspection) needs these three things, so they stand apart from
 * redis-rwlock.c (the acquisition's scripts), which the store's vtable reaches: both
 * over the exchange engine, neither calling the other.
 */
#include "config.h"

#include <string.h>

#include <hiredis/hiredis.h>

#include "redis-store-private.h"

/* RW RENEW READER: KEYS[1] = a reader lease, KEYS[2] = its lock's readers index;
 * ARGV[1] = the hold's value, ARGV[2] = TTL in ms, ARGV[3] = the registry's client id.
 * As RENEW (1: renewed; 0: the key is gone or foreign), and lost too (0) when the
 * registration is gone from the index (the index was deleted or evicted: writers no
 * longer see this reader); renewed, the registration's score moves with the TTL. */
static const char renew_reader_script[]
    = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then\n"
      "  return 0\n"
      "end\n"
      "if not redis.call('ZSCORE', KEYS[2], ARGV[3]) then\n"
      "  return 0\n"
      "end\n"
      "redis.call('PEXPIRE', KEYS[1], ARGV[2])\n"
      "local t = redis.call('TIME')\n"
      "local ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
      "redis.call('ZADD', KEYS[2], string.format('%.0f', ms + tonumber(ARGV[2])), ARGV[3])\n"
      "return 1\n";


char *
rl_redis_rw_reader_index (const char *key, const char *value, char **id)
{
  static const char tail[] = "}:rw:r:";
  const char *colon = value != NULL ? strrchr (value, ':') : NULL;
  gsize id_len = colon != NULL ? (gsize) (colon - value) : 0;
  gsize key_len = strlen (key);
  gsize prefix_len;

  /* `…{name}:rw:r:CLIENT_ID` holding `CLIENT_ID:N`. */
  if (id_len == 0 || key_len < id_len + sizeof tail - 1
      || strncmp (key + key_len - id_len, value, id_len) != 0
      || strncmp (key + key_len - id_len - (sizeof tail - 1), tail, sizeof tail - 1) != 0)
    return NULL;
  prefix_len = key_len - id_len - (sizeof tail - 1);
  if (memchr (key, '{', prefix_len) == NULL)
    return NULL;
  *id = g_strndup (value, id_len);
  return g_strdup_printf ("%.*s}:rw:readers", (int) prefix_len, key);
}

const RlScript *
rl_redis_rw_renew_reader_script (void)
{
  static RlScript script;
  static gsize once = 0;

  if (g_once_init_enter (&once))
    {
      rl_redis_script_init (&script, renew_reader_script);
      g_once_init_leave (&once, 1);
    }
  return &script;
}

gboolean
rl_redis_rw_registered (RlStore *store, const char *key, const char *value, gboolean *registered,
                        GError **error)
{
  g_autofree char *id = NULL;
  g_autofree char *index = rl_redis_rw_reader_index (key, value, &id);
  const char *argv[3] = { "ZSCORE", index, id };
  redisReply *reply;

  *registered = TRUE;
  if (index == NULL)
    return TRUE;
  reply = rl_redis_store_call (store, index, 3, argv, NULL, 0, NULL, NULL, FALSE, error);
  if (reply == NULL)
    return FALSE;
  *registered = reply->type != REDIS_REPLY_NIL;
  freeReplyObject (reply);
  return TRUE;
}
