/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* testsentinel.c: a private, throwaway master–replica deployment watched by Sentinels,
 * for test programs.
 *
 * A client that finds its master through Sentinel is only tested for real when the
 * master changes under it. So the helper starts the data nodes (a master, node 0, and
 * its replicas, `replicaof` in their configuration) and the Sentinels as processes of
 * their own (testprocess.c: a temporary directory each, SIGKILL, SIGSTOP, restart on
 * the same port), bound to 127.0.0.1 on free ports with persistence off, and can force
 * a failover and wait for its outcome.
 *
 * The Sentinels' settings make everything as fast as Sentinel allows: a quorum of one,
 * `down-after-milliseconds 1000`, `failover-timeout 5000`, and replicas that sync at
 * once (diskless, no delay, loaded from the socket: no dump.rdb for a restart to
 * load). Sentinel learns of replicas from the master's INFO, which it asks for as soon
 * as it connects and then only every ten seconds, so the Sentinels are started only
 * once every replica is in sync and the master lists them all: their first INFO
 * already names every replica. Sentinels learn of each other from hello messages
 * published every two seconds, which is most of the time a deployment of several
 * Sentinels takes to come up. Every configuration file lives in a directory the
 * process may write: Sentinel rewrites its own, and has data nodes rewrite theirs
 * (CONFIG REWRITE) when it reconfigures them, so a restarted node keeps its new role.
 *
 * A forced failover is over, for the Sentinels, about a second after SENTINEL FAILOVER.
 * The former master, if it runs, keeps saying it is master (and taking writes) until
 * a Sentinel demotes it some ten seconds later, as it does with a failed master that
 * comes back; so "which node is master" asks the Sentinels when two nodes say so.
 *
 * Sentinel runs as `redis-sentinel CONFIG` when that program is installed, else as
 * `redis-server CONFIG --sentinel`, which is the same code. Nothing waits a fixed time:
 * the state is polled (rl_test_wait_until()) over cached connections with timeouts.
 */
#include "config.h"

#include <redislock/redislock-test.h>

#include <string.h>

#include <gio/gio.h>

#include "reply-map.h"
#include "testprocess.h"

#define MASTER_NAME "mymaster"
/* Timeout of one command. */
#define COMMAND_TIMEOUT_MS 2000
/* How long the deployment may take to come up. */
#define FORM_TIMEOUT_MS 30000

struct _RedisLockTestSentinel
{
  guint n_nodes;
  RlTestProcess **nodes; /* data nodes; 0 is the first master */
  char **node_urls;      /* redis://127.0.0.1:PORT of each */
  guint n_sentinels;
  RlTestProcess **sentinels;
  char *url; /* redis-sentinel://127.0.0.1:PORT,…#MASTER_NAME */
};

/* --- Talking to processes ---------------------------------------------------------- */

/* Runs a command on @process for a check of the deployment; NULL, with the reason in
 * @why, when it failed or answered an error. */
static redisReply *ask (RlTestProcess *process, GString *why, const char *format, ...)
    G_GNUC_PRINTF (3, 4);

static redisReply *
ask (RlTestProcess *process, GString *why, const char *format, ...)
{
  GError *error = NULL;
  redisReply *reply;
  va_list ap;

  va_start (ap, format);
  reply = rl_test_process_vcommand (process, COMMAND_TIMEOUT_MS, &error, format, ap);
  va_end (ap);
  if (reply == NULL)
    {
      g_string_printf (why, "%s", error->message);
      g_error_free (error);
    }
  return reply;
}

/* INFO @section of @process, or NULL with @why. */
static char *
get_info (RlTestProcess *process, const char *section, GString *why)
{
  redisReply *reply = ask (process, why, "INFO %s", section);
  char *text = NULL;

  if (reply == NULL)
    return NULL;
  if (reply->type == REDIS_REPLY_STRING)
    text = g_strndup (reply->str, reply->len);
  else
    g_string_printf (why, "%s: unexpected reply to INFO", process->address);
  freeReplyObject (reply);
  return text;
}

/* The string value of @name in a RESP2 map (SENTINEL MASTER, each entry of SENTINEL
 * REPLICAS), or NULL. */
static const char *
pairs_get (const redisReply *pairs, const char *name)
{
  const redisReply *value = rl_reply_map_get (pairs, name);

  return value != NULL && value->type == REDIS_REPLY_STRING ? value->str : NULL;
}

/* The data node listening on @port, or -1. */
static int
node_of_port (RedisLockTestSentinel *sentinel, long long port)
{
  for (guint i = 0; i < sentinel->n_nodes; i++)
    if (sentinel->nodes[i]->port == port)
      return (int)i;
  return -1;
}

/* The data node @process's Sentinel names as master (SENTINEL get-master-addr-by-name),
 * or -1 with @why. */
static int
master_named_by (RedisLockTestSentinel *sentinel, RlTestProcess *process, GString *why)
{
  redisReply *reply = ask (process, why, "SENTINEL get-master-addr-by-name %s", MASTER_NAME);
  int node = -1;

  if (reply == NULL)
    return -1;
  if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
      && reply->element[1]->type == REDIS_REPLY_STRING)
    node = node_of_port (sentinel, g_ascii_strtoll (reply->element[1]->str, NULL, 10));
  if (node < 0)
    g_string_printf (why, "Sentinel %s names no known master", process->address);
  freeReplyObject (reply);
  return node;
}

/* TRUE when data node @node is up and its ROLE is master. */
static gboolean
is_master (RedisLockTestSentinel *sentinel, guint node)
{
  redisReply *reply;
  gboolean master;

  if (!rl_test_process_is_up (sentinel->nodes[node]))
    return FALSE;
  reply = rl_test_process_command (sentinel->nodes[node], COMMAND_TIMEOUT_MS, NULL, "ROLE");
  if (reply == NULL)
    return FALSE;
  master = reply->type == REDIS_REPLY_ARRAY && reply->elements > 0
           && reply->element[0]->type == REDIS_REPLY_STRING
           && strcmp (reply->element[0]->str, "master") == 0;
  freeReplyObject (reply);
  return master;
}

/* --- Waiting ----------------------------------------------------------------------- */

/* Whether every replica acknowledges a write at once: until a replica's first
 * acknowledgement after its sync (up to a second later), WAIT counts it out, and a
 * test of redis_lock_registry_set_min_replicas() would fail for no reason of its own. */
static gboolean
replicas_acknowledge (RedisLockTestSentinel *sentinel, GString *why)
{
  redisReply *reply = ask (sentinel->nodes[0], why, "SET redislock-test:sync 1");
  long long acks;

  if (reply != NULL)
    {
      freeReplyObject (reply);
      reply = ask (sentinel->nodes[0], why, "WAIT %u 50", sentinel->n_nodes - 1);
    }
  if (reply == NULL)
    return FALSE;
  acks = reply->type == REDIS_REPLY_INTEGER ? reply->integer : -1;
  freeReplyObject (reply);
  reply = rl_test_process_command (sentinel->nodes[0], COMMAND_TIMEOUT_MS, NULL,
                                   "DEL redislock-test:sync");
  if (reply != NULL)
    freeReplyObject (reply);
  if (acks < (long long) sentinel->n_nodes - 1)
    {
      g_string_printf (why, "%lld of %u replicas acknowledge writes", acks, sentinel->n_nodes - 1);
      return FALSE;
    }
  return TRUE;
}

/* The data nodes are ready for the Sentinels' first INFO: every running replica is in
 * sync with the master, and the master lists them all. */
static gboolean
check_replicated (gpointer data, GString *why)
{
  RedisLockTestSentinel *sentinel = data;
  g_autofree char *info = NULL;
  g_autofree char *connected = NULL;

  for (guint i = 1; i < sentinel->n_nodes; i++)
    {
      g_autofree char *replica_info = get_info (sentinel->nodes[i], "replication", why);
      g_autofree char *link = NULL;

      if (replica_info == NULL)
        return FALSE;
      link = rl_test_info_field (replica_info, "master_link_status");
      if (g_strcmp0 (link, "up") != 0)
        {
          g_string_printf (why, "replica %u has master_link_status:%s", i, link ? link : "?");
          return FALSE;
        }
    }
  info = get_info (sentinel->nodes[0], "replication", why);
  if (info == NULL)
    return FALSE;
  connected = rl_test_info_field (info, "connected_slaves");
  if (g_ascii_strtoull (connected ? connected : "0", NULL, 10) != sentinel->n_nodes - 1)
    {
      g_string_printf (why, "the master lists %s replicas", connected ? connected : "no");
      return FALSE;
    }
  for (guint i = 1; i < sentinel->n_nodes; i++)
    {
      g_autofree char *name = g_strdup_printf ("slave%u", i - 1);
      g_autofree char *entry = rl_test_info_field (info, name);

      if (entry == NULL || strstr (entry, "state=online") == NULL)
        {
          g_string_printf (why, "the master lists replica %u as %s", i, entry ? entry : "absent");
          return FALSE;
        }
    }
  return replicas_acknowledge (sentinel, why);
}

/* Sentinel @s watches the master, knows every replica (connected, its link to the
 * master up as the replica's own INFO says) and every other Sentinel. */
static gboolean
check_sentinel (RedisLockTestSentinel *sentinel, guint s, GString *why)
{
  RlTestProcess *process = sentinel->sentinels[s];
  redisReply *master;
  redisReply *replicas;
  const char *flags;
  const char *others;
  gboolean ok;
  guint known = 0;

  master = ask (process, why, "SENTINEL MASTER %s", MASTER_NAME);
  if (master == NULL)
    return FALSE;
  flags = pairs_get (master, "flags");
  others = pairs_get (master, "num-other-sentinels");
  ok = g_strcmp0 (flags, "master") == 0;
  if (!ok)
    g_string_printf (why, "Sentinel %u sees the master as %s", s, flags ? flags : "?");
  else if (others == NULL || g_ascii_strtoull (others, NULL, 10) != sentinel->n_sentinels - 1)
    {
      g_string_printf (why, "Sentinel %u knows %s other Sentinels of %u", s, others ? others : "no",
                       sentinel->n_sentinels - 1);
      ok = FALSE;
    }
  freeReplyObject (master);
  if (!ok)
    return FALSE;

  replicas = ask (process, why, "SENTINEL REPLICAS %s", MASTER_NAME);
  if (replicas == NULL)
    return FALSE;
  for (size_t i = 0; ok && replicas->type == REDIS_REPLY_ARRAY && i < replicas->elements; i++)
    {
      const redisReply *entry = replicas->element[i];
      const char *port = pairs_get (entry, "port");
      const char *link = pairs_get (entry, "master-link-status");

      flags = pairs_get (entry, "flags");
      if (port == NULL || node_of_port (sentinel, g_ascii_strtoll (port, NULL, 10)) < 0)
        continue;
      if (g_strcmp0 (flags, "slave") != 0 || g_strcmp0 (link, "ok") != 0)
        {
          g_string_printf (why, "Sentinel %u sees replica on port %s as %s, link %s", s, port,
                           flags ? flags : "?", link ? link : "?");
          ok = FALSE;
        }
      known++;
    }
  freeReplyObject (replicas);
  if (ok && known != sentinel->n_nodes - 1)
    {
      g_string_printf (why, "Sentinel %u knows %u replicas of %u", s, known, sentinel->n_nodes - 1);
      ok = FALSE;
    }
  return ok;
}

static gboolean
check_sentinels (gpointer data, GString *why)
{
  RedisLockTestSentinel *sentinel = data;

  for (guint s = 0; s < sentinel->n_sentinels; s++)
    if (!check_sentinel (sentinel, s, why))
      return FALSE;
  return TRUE;
}

/* --- Making the deployment --------------------------------------------------------- */

/* Writes @process's configuration: a data node (a replica of @master_port when not 0)
 * or, with @sentinel_of, a Sentinel watching the master on that port. */
static gboolean
write_conf (RlTestProcess *process, int master_port, int sentinel_of, GError **error)
{
  g_autoptr (GString) conf = g_string_new (NULL);

  g_string_append_printf (conf,
                          "# Written by redis_lock_test_sentinel_new(): 127.0.0.1 only, "
                          "no persistence.\n"
                          "bind 127.0.0.1\n"
                          "protected-mode no\n"
                          "port %d\n",
                          process->port);
  rl_test_process_append_conf (process, conf);
  if (sentinel_of != 0)
    g_string_append_printf (conf,
                            "sentinel resolve-hostnames no\n"
                            "sentinel monitor " MASTER_NAME " 127.0.0.1 %d 1\n"
                            "sentinel down-after-milliseconds " MASTER_NAME " 1000\n"
                            "sentinel failover-timeout " MASTER_NAME " 5000\n",
                            sentinel_of);
  else
    {
      g_string_append (conf, "save \"\"\n"
                             "appendonly no\n"
                             "repl-diskless-sync yes\n"
                             "repl-diskless-sync-delay 0\n"
                             "repl-diskless-load swapdb\n");
      if (master_port != 0)
        g_string_append_printf (conf, "replicaof 127.0.0.1 %d\n", master_port);
    }
  return rl_test_process_write_conf (process, conf, error);
}

/* Configures a process of start_new() for ports[0]; @data, two ints: the master port
 * and the port of the master a Sentinel watches of write_conf(). */
static gboolean
configure (RlTestProcess *process, const int *ports, gpointer data, GError **error)
{
  const int *roles = data;

  rl_test_process_set_port (process, ports[0]);
  return write_conf (process, roles[0], roles[1], error);
}

/* Makes and starts a process, on another port when its port was taken. */
static RlTestProcess *
start_new (const char *executable, const char *extra_arg, const char *prefix, int master_port,
           int sentinel_of, GError **error)
{
  int roles[2] = { master_port, sentinel_of };
  g_autoptr (RlTestProcess) process
      = rl_test_process_new (executable, extra_arg, prefix, NULL, 0, error);

  if (process == NULL || !rl_test_process_start_new (process, 1, configure, roles, error))
    return NULL;
  return g_steal_pointer (&process);
}

RedisLockTestSentinel *
redis_lock_test_sentinel_new (guint n_replicas, guint n_sentinels, GError **error)
{
  g_autoptr (RedisLockTestSentinel) sentinel = NULL;
  g_autofree char *server = NULL;
  g_autofree char *sentinel_program = NULL;
  g_autoptr (GString) url = g_string_new ("redis-sentinel://");
  const char *sentinel_arg = NULL;

  g_return_val_if_fail (n_sentinels >= 1, NULL);
  g_return_val_if_fail (error == NULL || *error == NULL, NULL);

  server = rl_test_find_redis_server ();
  sentinel_program = rl_test_find_program ("redis-sentinel", NULL);
  if (server == NULL)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_NOT_FOUND,
                   "redis-server is not installed (looked in PATH, /usr/sbin and /usr/bin); "
                   "install the redis-server package to run these tests");
      return NULL;
    }
  if (sentinel_program == NULL)
    {
      /* The same program in Sentinel mode. */
      sentinel_program = g_strdup (server);
      sentinel_arg = "--sentinel";
    }

  sentinel = g_new0 (RedisLockTestSentinel, 1);
  sentinel->n_nodes = 1 + n_replicas;
  sentinel->nodes = g_new0 (RlTestProcess *, sentinel->n_nodes);
  sentinel->node_urls = g_new0 (char *, sentinel->n_nodes + 1);
  sentinel->n_sentinels = n_sentinels;
  sentinel->sentinels = g_new0 (RlTestProcess *, n_sentinels);

  for (guint i = 0; i < sentinel->n_nodes; i++)
    {
      sentinel->nodes[i] = start_new (server, NULL, "redislock-sentinel-node",
                                      i == 0 ? 0 : sentinel->nodes[0]->port, 0, error);
      if (sentinel->nodes[i] == NULL)
        return NULL;
      sentinel->node_urls[i] = g_strdup_printf ("redis://127.0.0.1:%d", sentinel->nodes[i]->port);
    }
  if (!rl_test_wait_until (check_replicated, sentinel, FORM_TIMEOUT_MS, "The replicas did not sync",
                           error))
    return NULL;

  for (guint s = 0; s < n_sentinels; s++)
    {
      sentinel->sentinels[s] = start_new (sentinel_program, sentinel_arg, "redislock-sentinel", 0,
                                          sentinel->nodes[0]->port, error);
      if (sentinel->sentinels[s] == NULL)
        return NULL;
      g_string_append_printf (url, "%s127.0.0.1:%d", s > 0 ? "," : "",
                              sentinel->sentinels[s]->port);
    }
  g_string_append (url, "#" MASTER_NAME);
  sentinel->url = g_string_free (g_steal_pointer (&url), FALSE);

  if (!rl_test_wait_until (check_sentinels, sentinel, FORM_TIMEOUT_MS,
                           "The Sentinels did not come up", error))
    return NULL;
  return g_steal_pointer (&sentinel);
}

RedisLockTestSentinel *
redis_lock_test_sentinel_new_or_skip (guint n_replicas, guint n_sentinels)
{
  GError *error = NULL;
  RedisLockTestSentinel *sentinel = redis_lock_test_sentinel_new (n_replicas, n_sentinels, &error);

  return rl_test_or_skip (sentinel, error, "redislock test Sentinel deployment");
}

/* --- Accessors --------------------------------------------------------------------- */

const char *
redis_lock_test_sentinel_get_url (RedisLockTestSentinel *sentinel)
{
  g_return_val_if_fail (sentinel != NULL, NULL);
  return sentinel->url;
}

const char *
redis_lock_test_sentinel_get_master_name (RedisLockTestSentinel *sentinel)
{
  g_return_val_if_fail (sentinel != NULL, NULL);
  return MASTER_NAME;
}

guint
redis_lock_test_sentinel_get_n_nodes (RedisLockTestSentinel *sentinel)
{
  g_return_val_if_fail (sentinel != NULL, 0);
  return sentinel->n_nodes;
}

/* Data node @node of @sentinel, or NULL (with a critical) when there is no such node. */
static RlTestProcess *
node_process (RedisLockTestSentinel *sentinel, guint node)
{
  g_return_val_if_fail (sentinel != NULL, NULL);
  g_return_val_if_fail (node < sentinel->n_nodes, NULL);
  return sentinel->nodes[node];
}

const char *
redis_lock_test_sentinel_get_node_url (RedisLockTestSentinel *sentinel, guint node)
{
  return node_process (sentinel, node) != NULL ? sentinel->node_urls[node] : NULL;
}

GPid
redis_lock_test_sentinel_get_pid (RedisLockTestSentinel *sentinel, guint node)
{
  RlTestProcess *process = node_process (sentinel, node);

  return process != NULL ? process->pid : 0;
}

/* The data node the first running Sentinel names as master, or -1. */
static int
master_named (RedisLockTestSentinel *sentinel)
{
  g_autoptr (GString) why = g_string_new (NULL);

  for (guint s = 0; s < sentinel->n_sentinels; s++)
    if (rl_test_process_is_up (sentinel->sentinels[s]))
      {
        int node = master_named_by (sentinel, sentinel->sentinels[s], why);

        if (node >= 0)
          return node;
      }
  return -1;
}

int
redis_lock_test_sentinel_get_master (RedisLockTestSentinel *sentinel)
{
  g_autofree int *masters = NULL;
  guint n_masters = 0;
  int named;

  g_return_val_if_fail (sentinel != NULL, -1);
  masters = g_new (int, sentinel->n_nodes);
  for (guint i = 0; i < sentinel->n_nodes; i++)
    if (is_master (sentinel, i))
      masters[n_masters++] = (int)i;
  if (n_masters <= 1)
    return n_masters == 1 ? masters[0] : -1;
  /* Two nodes say master for a while after a failover when the old master runs (after
   * a forced failover, or when it comes back): Sentinel demotes it only some seconds
   * later. The one the Sentinels name is the master then. */
  named = master_named (sentinel);
  for (guint m = 0; m < n_masters; m++)
    if (masters[m] == named)
      return named;
  return masters[0];
}

/* --- Failover ---------------------------------------------------------------------- */

typedef struct
{
  RedisLockTestSentinel *sentinel;
  int old_master;
  int new_master; /* set when the check holds */
} Failover;

/* Every running Sentinel names the same new master, and it says so itself. */
static gboolean
check_failed_over (gpointer data, GString *why)
{
  Failover *f = data;
  RedisLockTestSentinel *sentinel = f->sentinel;
  int named = -1;

  for (guint s = 0; s < sentinel->n_sentinels; s++)
    {
      int node;

      if (!rl_test_process_is_up (sentinel->sentinels[s]))
        continue;
      node = master_named_by (sentinel, sentinel->sentinels[s], why);
      if (node < 0)
        return FALSE;
      if (node == f->old_master)
        {
          g_string_printf (why, "Sentinel %u still names node %d", s, node);
          return FALSE;
        }
      if (named >= 0 && node != named)
        {
          g_string_printf (why, "Sentinels name nodes %d and %d", named, node);
          return FALSE;
        }
      named = node;
    }
  if (named < 0)
    {
      g_string_printf (why, "no Sentinel runs");
      return FALSE;
    }
  if (!is_master (sentinel, (guint)named))
    {
      g_string_printf (why, "node %d is named master but is not master yet", named);
      return FALSE;
    }
  f->new_master = named;
  return TRUE;
}

/* Asks the first running Sentinel for a failover until one begins: a Sentinel answers
 * INPROG while a failover runs and NOGOODSLAVE while it knows no replica fit to be
 * promoted (just after an earlier failover, for instance). */
static gboolean
check_failover_started (gpointer data, GString *why)
{
  Failover *f = data;
  RedisLockTestSentinel *sentinel = f->sentinel;

  for (guint s = 0; s < sentinel->n_sentinels; s++)
    {
      redisReply *reply;
      gboolean ok;

      if (!rl_test_process_is_up (sentinel->sentinels[s]))
        continue;
      reply = ask (sentinel->sentinels[s], why, "SENTINEL FAILOVER %s", MASTER_NAME);
      if (reply == NULL)
        return FALSE;
      ok = reply->type == REDIS_REPLY_STATUS;
      if (!ok)
        g_string_printf (why, "SENTINEL FAILOVER: %s", reply->str != NULL ? reply->str : "?");
      freeReplyObject (reply);
      return ok;
    }
  g_string_printf (why, "no Sentinel runs");
  return FALSE;
}

int
redis_lock_test_sentinel_failover (RedisLockTestSentinel *sentinel, gint64 timeout_ms,
                                   GError **error)
{
  Failover f = { sentinel, -1, -1 };
  gint64 deadline = g_get_monotonic_time () + timeout_ms * G_TIME_SPAN_MILLISECOND;
  gint64 left;

  g_return_val_if_fail (sentinel != NULL, -1);
  g_return_val_if_fail (error == NULL || *error == NULL, -1);

  if (sentinel->n_nodes < 2)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                   "A failover needs a replica; this deployment has none");
      return -1;
    }
  f.old_master = master_named (sentinel);
  if (f.old_master < 0)
    {
      g_set_error (error, G_IO_ERROR, G_IO_ERROR_FAILED, "No running Sentinel names a master");
      return -1;
    }
  if (!rl_test_wait_until (check_failover_started, &f, timeout_ms, "No failover began", error))
    return -1;
  left = MAX (0, (deadline - g_get_monotonic_time ()) / G_TIME_SPAN_MILLISECOND);
  if (!rl_test_wait_until (check_failed_over, &f, left, "The failover did not complete", error))
    return -1;
  return f.new_master;
}

/* --- Faults ------------------------------------------------------------------------ */

RL_TEST_DEFINE_NODE_FAULTS (RedisLockTestSentinel, redis_lock_test_sentinel, node_process)

void
redis_lock_test_sentinel_stop_sentinel (RedisLockTestSentinel *sentinel, guint index)
{
  g_return_if_fail (sentinel != NULL);
  g_return_if_fail (index < sentinel->n_sentinels);
  rl_test_process_stop (sentinel->sentinels[index]);
}

void
redis_lock_test_sentinel_free (RedisLockTestSentinel *sentinel)
{
  if (sentinel == NULL)
    return;
  /* The Sentinels first, so none reconfigures a node while the nodes go. */
  for (guint s = 0; s < sentinel->n_sentinels; s++)
    rl_test_process_free (sentinel->sentinels[s]);
  for (guint i = 0; i < sentinel->n_nodes; i++)
    rl_test_process_free (sentinel->nodes[i]);
  g_free (sentinel->sentinels);
  g_free (sentinel->nodes);
  g_strfreev (sentinel->node_urls);
  g_free (sentinel->url);
  g_free (sentinel);
}
