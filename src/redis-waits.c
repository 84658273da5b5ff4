/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redis-waits.c: the waits-for records on Redis: the script that keeps them and what
 * its reply means.
 *
 * Every registry on one registry key keeps its waiters' records in one hash,
 * `waits:{registry_key}` (rl_store_waits_key()): field = the waiting acquisition's id,
 * value = its expiry on the server's clock in milliseconds, a space, and the record
 * (opaque here; waits.c writes and reads it). One key, so one Cluster slot: a waiter
 * looking for a cycle reads every record of the deployment in one request, which is
 * what makes a check cheap enough to run twice a second while waiting. Hash fields
 * have no expiry of their own before Redis 7.4, so the script keeps it: each call
 * deletes the fields whose time has passed, and the key itself expires with the
 * newest record, so a deployment nobody waits in holds no key.
 *
 * The server's TIME is the clock, so clients on hosts whose clocks disagree still
 * agree on which records are live; a script that writes after TIME is replicated by
 * its effects (the default since Redis 5.0, the only way since 7.0).
 *
 * This file builds the command line and reads the reply; redis-store.c sends it
 * through the one exchange engine (redis-exchange.c: routing, NOSCRIPT, redirections),
 * as it does the lease scripts.
 */
#include "config.h"

#include <hiredis/hiredis.h>

#include "redislock/redislock.h"
#include "redis-waits.h"

/* WAITS: KEYS[1] = the records' hash, ARGV[1] = a record's id ('' for none), ARGV[2] =
 * its record ('' deletes it), ARGV[3] = its TTL in ms, ARGV[4] = '1' to return every
 * live record. Sets or deletes the one record, then (when asked) returns the others
 * still live, deleting the expired ones on the way; the hash's own expiry is pushed out
 * to the newest record's, never pulled in. One script, so that the write and the read
 * are one step: a check sees its own record and every record written before it. */
const char rl_redis_waits_script[]
    = "local t = redis.call('TIME')\n"
      "local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
      "if ARGV[1] ~= '' then\n"
      "  if ARGV[2] == '' then\n"
      "    redis.call('HDEL', KEYS[1], ARGV[1])\n"
      "  else\n"
      "    local ttl = tonumber(ARGV[3])\n"
      "    redis.call('HSET', KEYS[1], ARGV[1], string.format('%d', now + ttl) .. ' ' .. ARGV[2])\n"
      "    if redis.call('PTTL', KEYS[1]) < ttl then\n"
      "      redis.call('PEXPIRE', KEYS[1], ttl)\n"
      "    end\n"
      "  end\n"
      "end\n"
      "local out = {}\n"
      "if ARGV[4] ~= '1' then\n"
      "  return out\n"
      "end\n"
      "local all = redis.call('HGETALL', KEYS[1])\n"
      "for i = 1, #all, 2 do\n"
      "  local v = all[i + 1]\n"
      "  local sp = string.find(v, ' ', 1, true)\n"
      "  local exp = sp and tonumber(string.sub(v, 1, sp - 1))\n"
      "  if not exp or exp < now then\n"
      "    redis.call('HDEL', KEYS[1], all[i])\n"
      "  else\n"
      "    out[#out + 1] = string.sub(v, sp + 1)\n"
      "  end\n"
      "end\n"
      "return out\n";

void
rl_redis_waits_argv (const char *argv[8], const char *key, const char *id, const char *record,
                     gint64 ttl_ms, gboolean read, char ttl_text[24])
{
  g_snprintf (ttl_text, 24, "%" G_GINT64_FORMAT, MAX (ttl_ms, 1));
  argv[0] = "EVALSHA";
  argv[1] = NULL; /* the caller's script slot */
  argv[2] = "1";
  argv[3] = key;
  argv[4] = id != NULL ? id : "";
  argv[5] = record != NULL ? record : "";
  argv[6] = ttl_text;
  argv[7] = read ? "1" : "0";
}

gboolean
rl_redis_waits_read_reply (const redisReply *reply, GPtrArray *records, GError **error)
{
  if (reply->type != REDIS_REPLY_ARRAY)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS,
                   "The waits-for script returned an unexpected reply (type %d)", reply->type);
      return FALSE;
    }
  for (size_t i = 0; records != NULL && i < reply->elements; i++)
    {
      const redisReply *r = reply->element[i];

      if (r->type == REDIS_REPLY_STRING)
        g_ptr_array_add (records, g_strndup (r->str, r->len));
    }
  return TRUE;
}
