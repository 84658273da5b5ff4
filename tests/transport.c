/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* transport.c: a reply that is already in the socket when the deadline comes is read,
 * not taken for a timeout (src/sync.h's rl_poll_until(), and its callers in
 * src/transport.c and src/connection.c).
 *
 * A thread can stop running between sending a request and waiting for its reply: its
 * process stopped by a signal, or not scheduled on a loaded machine. When it runs again
 * the reply may be there and the deadline gone. The wait must then still look at the
 * socket once: a lock command whose reply is ignored becomes an error and a doubtful
 * lease, where the caller had in fact been answered in time.
 *
 * Each test sends a request, waits (with no deadline of its own) until the reply's
 * bytes are in the socket, which stands for the time the thread was not running, and
 * then asks the library's wait for the reply with no time left. Without the last look
 * each of them reports "Redis timed out". The waits are internal: the program links the
 * private library, as the URL tests do.
 */
#include "config.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common.h"
#include "connection.h"
#include "sync.h"
#include "url.h"

/* A connection to @server's socket, within a generous timeout. */
static RlConn *
open_conn (RedisLockTestServer *server)
{
  g_autoptr (GError) error = NULL;
  RlConnConfig config = { 0 };
  RlConn *conn;

  g_assert_true (rl_conn_config_parse (redis_lock_test_server_get_url (server), &config, &error));
  g_assert_no_error (error);
  conn = rl_conn_open (&config, NULL, 5000, &error);
  g_assert_no_error (error);
  g_assert_nonnull (conn);
  rl_conn_config_clear (&config);
  return conn;
}

/* Sends PING on @conn and returns once its reply can be read from the socket. */
static void
ping_and_wait_for_reply_bytes (RlConn *conn)
{
  const char *argv[] = { "PING" };
  struct pollfd pfd = { conn->fd, POLLIN, 0 };

  rl_conn_append (conn, 1, argv);
  while (rl_conn_wants_write (conn))
    g_assert_true (rl_conn_write_some (conn));
  g_assert_cmpint (rl_poll_until (&pfd, 1, RL_FOREVER), ==, 1);
}

static void
test_poll_after_deadline (void)
{
  int sv[2];
  struct pollfd pfd;
  char byte = 'x';

  g_test_summary ("rl_poll_until() with its deadline gone still reports a socket that is "
                  "ready, and reports 0 (timed out) at once for one that is not.");
  g_assert_cmpint (socketpair (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), ==, 0);

  pfd = (struct pollfd) { sv[0], POLLIN, 0 };
  g_assert_cmpint (rl_poll_until (&pfd, 1, g_get_monotonic_time () - G_USEC_PER_SEC), ==, 0);
  g_assert_cmpint (rl_poll_until (&pfd, 1, 0), ==, 0);

  g_assert_cmpint (write (sv[1], &byte, 1), ==, 1);
  pfd = (struct pollfd) { sv[0], POLLIN, 0 };
  g_assert_cmpint (rl_poll_until (&pfd, 1, g_get_monotonic_time () - G_USEC_PER_SEC), ==, 1);
  g_assert_cmpint (pfd.revents & POLLIN, ==, POLLIN);
  pfd = (struct pollfd) { sv[0], POLLIN, 0 };
  g_assert_cmpint (rl_poll_until (&pfd, 1, 0), ==, 1);

  close (sv[0]);
  close (sv[1]);
}

static void
test_get_reply_without_time_left (void)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  RlConn *conn;
  redisReply *reply = NULL;

  g_test_summary ("A connection with no time left (timeout 0) reads the reply that is "
                  "already in its socket instead of failing with \"timed out\".");
  server = redis_lock_test_server_new_or_skip (NULL);
  if (server == NULL)
    return;
  conn = open_conn (server);
  ping_and_wait_for_reply_bytes (conn);
  rl_conn_set_timeout (conn, 0);
  if (!rl_conn_get_reply (conn, &reply))
    g_error ("no reply: %s", conn->errstr);
  g_assert_nonnull (reply);
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STATUS);
  g_assert_cmpstr (reply->str, ==, "PONG");
  freeReplyObject (reply);
  rl_conn_free (conn);
}

/* Counts the replies rl_conns_exchange() hands over, checking each is PONG. */
static void
count_pong (guint conn_index, redisReply *reply, gpointer user_data)
{
  guint *count = user_data;

  g_assert_cmpuint (conn_index, ==, 0);
  g_assert_cmpint (reply->type, ==, REDIS_REPLY_STATUS);
  g_assert_cmpstr (reply->str, ==, "PONG");
  freeReplyObject (reply);
  (*count)++;
}

static void
test_exchange_without_time_left (void)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  RlConn *conn;
  guint expected = 1, count = 0;
  gboolean failed = TRUE;

  g_test_summary ("The exchange over several connections (the pipeline's) with no time "
                  "left (timeout 0) reads the replies already in their sockets instead of "
                  "failing them with \"timed out\".");
  server = redis_lock_test_server_new_or_skip (NULL);
  if (server == NULL)
    return;
  conn = open_conn (server);
  ping_and_wait_for_reply_bytes (conn);
  g_assert_cmpuint (rl_conns_exchange (&conn, 1, &expected, 0, count_pong, &count, &failed), ==,
                    0);
  g_assert_false (failed);
  g_assert_cmpuint (count, ==, 1);
  g_assert_cmpint (conn->err, ==, RL_CONN_OK);
  rl_conn_free (conn);
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/transport/late-reply/poll", test_poll_after_deadline);
  g_test_add_func ("/transport/late-reply/get-reply", test_get_reply_without_time_left);
  g_test_add_func ("/transport/late-reply/exchange", test_exchange_without_time_left);
  return g_test_run ();
}
