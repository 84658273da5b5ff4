/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* bench-hiredis.c: the plain hiredis connections every baseline of redislock-bench is
 * measured on.
 *
 * A baseline is only fair if it talks to the same server in the same way as the
 * library, minus the library: so these connections take the same URL forms (redis://,
 * unix://, with AUTH and SELECT), read by the library's own parser (url.h), and the
 * reference call is an EVALSHA, the command the library's own scripts are sent with, of
 * a script that does nothing (`return 1`). The lock protocol done by hand (one SET NX
 * in the cheapest case, a checked UNLINK and a PUBLISH to release) is here too, as the
 * least any correct Redis lock must ask of the server. Errors become a GError so that a
 * section can print "n/a" with the reason and the run goes on.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "url.h"

/* --- Targets, commands and the scripts --------------------------------------------- */

void
raw_target_clear (RawTarget *t)
{
  g_free (t->socket_path);
  g_free (t->host);
  g_free (t->username);
  g_free (t->password);
  memset (t, 0, sizeof *t);
}

gboolean
raw_target_parse (const char *url, RawTarget *t, GError **error)
{
  RlConnConfig config;

  memset (t, 0, sizeof *t);
  if (!rl_conn_config_parse (url != NULL ? url : "redis://127.0.0.1:6379", &config, error))
    return FALSE;
  if (config.tls)
    {
      g_autofree char *where = rl_conn_config_describe (&config);

      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_SUPPORTED,
                   "the benchmark's own connections do not speak TLS (the server at %s)",
                   where);
      rl_conn_config_clear (&config);
      return FALSE;
    }
  t->socket_path = g_steal_pointer (&config.path);
  t->host = g_steal_pointer (&config.host);
  t->port = config.port;
  t->username = g_steal_pointer (&config.username);
  t->password = g_steal_pointer (&config.password);
  t->db = config.db;
  rl_conn_config_clear (&config);
  return TRUE;
}

redisReply *
raw_command (redisContext *c, GError **error, const char *format, ...)
{
  redisReply *r;
  va_list ap;

  va_start (ap, format);
  r = redisvCommand (c, format, ap);
  va_end (ap);
  if (r == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s", c->errstr);
      return NULL;
    }
  if (r->type == REDIS_REPLY_ERROR)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis replied: %s", r->str);
      freeReplyObject (r);
      return NULL;
    }
  return r;
}

redisContext *
raw_connect (const RawTarget *t, GError **error)
{
  redisContext *c;
  redisReply *r = NULL;

  c = t->socket_path != NULL ? redisConnectUnix (t->socket_path) : redisConnect (t->host, t->port);
  if (c == NULL || c->err != 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "cannot connect to redis: %s",
                   c != NULL ? c->errstr : "out of memory");
      if (c != NULL)
        redisFree (c);
      return NULL;
    }
  if (t->password != NULL && *t->password != '\0')
    {
      if (t->username != NULL && *t->username != '\0')
        r = raw_command (c, error, "AUTH %s %s", t->username, t->password);
      else
        r = raw_command (c, error, "AUTH %s", t->password);
      if (r == NULL)
        goto fail;
      freeReplyObject (r);
    }
  if (t->db != 0)
    {
      r = raw_command (c, error, "SELECT %d", t->db);
      if (r == NULL)
        goto fail;
      freeReplyObject (r);
    }
  return c;

fail:
  redisFree (c);
  return NULL;
}

/* One EVALSHA of the trivial script; FALSE with @error set unless it answered 1. */
static gboolean
raw_evalsha (redisContext *c, const char *sha, GError **error)
{
  redisReply *r = raw_command (c, error, "EVALSHA %s 0", sha);
  gboolean ok;

  if (r == NULL)
    return FALSE;
  ok = r->type == REDIS_REPLY_INTEGER && r->integer == 1;
  freeReplyObject (r);
  if (!ok)
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "EVALSHA returned something other than 1");
  return ok;
}

/* The lock protocol done by hand, for baselines: what any correct Redis lock must ask
 * of the server, without the library. Written from the protocol (src/redis-store.c),
 * in the cheapest shape: one SET NX in the uncontended case.
 * acquire: KEYS[1] = key, ARGV[1] = owner id, ARGV[2] = TTL ms; returns 1 when held.
 * release: KEYS[1] = key, ARGV[1] = owner id, ARGV[2] = channel; deletes and publishes
 * only for the owner. */
static const char raw_acquire_script[]
    = "if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end\n"
      "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
      "  redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1\n"
      "end\n"
      "return 0\n";
static const char raw_release_script[] = "if redis.call('GET', KEYS[1]) == ARGV[1] then\n"
                                         "  redis.call('UNLINK', KEYS[1])\n"
                                         "  redis.call('PUBLISH', ARGV[2], KEYS[1])\n"
                                         "  return 1\n"
                                         "end\n"
                                         "return 0\n";

/* --- Connections with the scripts loaded ------------------------------------------- */

void
raw_close (RawConn *r)
{
  if (r == NULL)
    return;
  if (r->c != NULL)
    redisFree (r->c);
  g_free (r->sha);
  g_free (r->acquire_sha);
  g_free (r->release_sha);
  g_free (r);
}

/* SCRIPT LOAD; the script's sha or NULL with @error set. */
static char *
raw_load (redisContext *c, const char *script, GError **error)
{
  redisReply *reply = raw_command (c, error, "SCRIPT LOAD %s", script);
  char *sha;

  if (reply == NULL)
    return NULL;
  sha = g_strdup (reply->type == REDIS_REPLY_STRING ? reply->str : "");
  freeReplyObject (reply);
  return sha;
}

RawConn *
raw_open (const RawTarget *t, GError **error)
{
  g_autoptr (RawConn) r = g_new0 (RawConn, 1);

  r->c = raw_connect (t, error);
  if (r->c == NULL || (r->sha = raw_load (r->c, "return 1", error)) == NULL
      || (r->acquire_sha = raw_load (r->c, raw_acquire_script, error)) == NULL
      || (r->release_sha = raw_load (r->c, raw_release_script, error)) == NULL)
    return NULL;
  return g_steal_pointer (&r);
}

gboolean
raw_call (RawConn *r, GError **error)
{
  return raw_evalsha (r->c, r->sha, error);
}

gboolean
raw_lock_pair (RawConn *r, const char *key, GError **error)
{
  redisReply *reply;
  gboolean ok;

  reply = raw_command (r->c, error, "EVALSHA %s 1 %s %s %s", r->acquire_sha, key, "raw-owner",
                       "60000");
  if (reply == NULL)
    return FALSE;
  ok = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
  freeReplyObject (reply);
  if (ok)
    {
      reply = raw_command (r->c, error, "EVALSHA %s 1 %s %s %s-channel", r->release_sha, key,
                           "raw-owner", key);
      if (reply == NULL)
        return FALSE;
      ok = reply->type == REDIS_REPLY_INTEGER && reply->integer == 1;
      freeReplyObject (reply);
    }
  if (!ok)
    g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "hand-made lock of %s failed", key);
  return ok;
}

gint64
raw_pipeline (RawConn *r, guint n, GError **error)
{
  gint64 t0 = now_ns ();
  guint i;

  for (i = 0; i < n; i++)
    redisAppendCommand (r->c, "EVALSHA %s 0", r->sha);
  for (i = 0; i < n; i++)
    {
      void *reply = NULL;

      if (redisGetReply (r->c, &reply) != REDIS_OK)
        {
          g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "redis: %s", r->c->errstr);
          return -1;
        }
      freeReplyObject (reply);
    }
  return now_ns () - t0;
}

void
raw_evalsha_stats (RawConn *r, guint64 *calls, guint64 *usec)
{
  redisReply *reply = raw_command (r->c, NULL, "INFO commandstats");
  const char *line;

  *calls = *usec = 0;
  if (reply == NULL)
    return;
  if (reply->type == REDIS_REPLY_STRING && (line = strstr (reply->str, "cmdstat_evalsha:")) != NULL)
    {
      unsigned long long c = 0, u = 0;

      if (sscanf (line, "cmdstat_evalsha:calls=%llu,usec=%llu", &c, &u) == 2)
        {
          *calls = c;
          *usec = u;
        }
    }
  freeReplyObject (reply);
}
