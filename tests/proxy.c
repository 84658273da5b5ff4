/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* proxy.c: the fault-injecting TCP proxy of proxy.h.
 *
 * One thread runs a poll() loop over the listening socket, a wake-up pipe and both
 * sockets of every connection. All sockets are non-blocking and each direction has an
 * output buffer, so a slow or frozen peer never stalls the other connections. Every
 * decision (hold this chunk, drop that reply, when a delayed reply is due) is taken by
 * that thread with the mutex held, right after the read, so a control call that
 * returned is seen by every chunk read after it. Calls that touch connections (release,
 * kill, free) are requests the thread carries out, because closing a socket another
 * thread is polling would let a new socket reuse its number under that poll(); the
 * caller waits for the thread to acknowledge them.
 */
/* pipe2(), accept4(), MSG_NOSIGNAL and memmem() are Linux/GNU, not ISO C. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "config.h"

#include "proxy.h"

#include "common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define PROXY_READ_SIZE 65536

typedef struct
{
  gint64 due_us; /* monotonic time it may be forwarded at */
  GByteArray *data;
} DelayedChunk;

typedef struct
{
  int client; /* the accepted socket */
  int server; /* our socket to the target */
  GByteArray *to_server;
  GByteArray *to_client;
  GByteArray *held; /* client bytes held back, in order; NULL when not holding */
  GByteArray *held_replies; /* server bytes held back; NULL when not holding */
  GQueue delayed;   /* DelayedChunk*, oldest first */
  gboolean server_eof;
  gboolean client_gone; /* the client closed with bytes held: they still go to the server */
  gboolean dead;
} ProxyConn;

struct _TestProxy
{
  int listener;
  int wake[2];
  char *url;
  guint16 port;
  /* The target: a Unix socket path, or a port on 127.0.0.1. */
  char *socket_path;
  guint16 target_port;
  GThread *thread;

  /* Guarded by sync. */
  TestSync sync;
  GPtrArray *conns; /* ProxyConn*; changed only by the proxy thread, mutex held */
  char *hold_match; /* armed hold, NULL when none */
  char *hold_reply_match; /* armed hold of replies, NULL when none */
  gboolean held;    /* a chunk was held since the last hold_requests() */
  guint drop;       /* replies still to drop */
  gint64 delay_us;
  guint accepted;
  guint dropped;
  guint64 requests; /* release/kill/stop requests made... */
  guint64 handled;  /* ...and carried out by the thread */
  gboolean release;
  gboolean kill;
  gboolean stop;
};

static void
set_cloexec_nonblock (int fd)
{
  g_assert_cmpint (fcntl (fd, F_SETFD, FD_CLOEXEC), ==, 0);
  g_assert_cmpint (fcntl (fd, F_SETFL, fcntl (fd, F_GETFL) | O_NONBLOCK), ==, 0);
}

static void
conn_free (ProxyConn *conn)
{
  close (conn->client);
  close (conn->server);
  g_byte_array_unref (conn->to_server);
  g_byte_array_unref (conn->to_client);
  if (conn->held != NULL)
    g_byte_array_unref (conn->held);
  if (conn->held_replies != NULL)
    g_byte_array_unref (conn->held_replies);
  while (!g_queue_is_empty (&conn->delayed))
    {
      DelayedChunk *chunk = g_queue_pop_head (&conn->delayed);
      g_byte_array_unref (chunk->data);
      g_free (chunk);
    }
  g_free (conn);
}

/* A new socket connected to the target, or -1. The connect is blocking: to a local
 * socket it completes (or fails) at once. */
static int
connect_target (TestProxy *proxy)
{
  int fd;

  if (proxy->socket_path != NULL)
    {
      struct sockaddr_un addr = { 0 };

      fd = socket (AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      g_assert_cmpint (fd, >=, 0);
      addr.sun_family = AF_UNIX;
      g_strlcpy (addr.sun_path, proxy->socket_path, sizeof addr.sun_path);
      if (connect (fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        {
          close (fd);
          return -1;
        }
    }
  else
    {
      struct sockaddr_in addr = { 0 };

      fd = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      g_assert_cmpint (fd, >=, 0);
      addr.sin_family = AF_INET;
      addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK);
      addr.sin_port = htons (proxy->target_port);
      if (connect (fd, (struct sockaddr *)&addr, sizeof addr) != 0)
        {
          close (fd);
          return -1;
        }
    }
  set_cloexec_nonblock (fd);
  return fd;
}

/* Called with the mutex held. */
static void
accept_connections (TestProxy *proxy)
{
  for (;;)
    {
      int client = accept4 (proxy->listener, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
      int server;
      ProxyConn *conn;

      if (client < 0)
        {
          if (errno == EINTR || errno == ECONNABORTED)
            continue;
          return; /* EAGAIN: none left */
        }
      proxy->accepted++;
      server = connect_target (proxy);
      if (server < 0)
        {
          close (client);
          continue;
        }
      conn = g_new0 (ProxyConn, 1);
      conn->client = client;
      conn->server = server;
      conn->to_server = g_byte_array_new ();
      conn->to_client = g_byte_array_new ();
      g_queue_init (&conn->delayed);
      g_ptr_array_add (proxy->conns, conn);
    }
}

/* Sends what @buf holds to @fd as far as the socket takes it; FALSE on a broken
 * connection. */
static gboolean
flush (int fd, GByteArray *buf)
{
  while (buf->len > 0)
    {
      ssize_t n = send (fd, buf->data, buf->len, MSG_NOSIGNAL);

      if (n < 0)
        {
          if (errno == EINTR)
            continue;
          return errno == EAGAIN || errno == EWOULDBLOCK;
        }
      g_byte_array_remove_range (buf, 0, (guint)n);
    }
  return TRUE;
}

/* Reads one chunk from @fd into @chunk: its length, 0 at end of file or when the
 * connection broke (*broken set), -1 when nothing is there now. */
static gssize
read_chunk (int fd, guint8 *chunk, gboolean *broken)
{
  for (;;)
    {
      ssize_t n = read (fd, chunk, PROXY_READ_SIZE);

      if (n > 0)
        return n;
      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        return -1;
      *broken = TRUE;
      return 0;
    }
}

/* A chunk the client sent: held, or queued for the server. Mutex held. */
static void
from_client (TestProxy *proxy, ProxyConn *conn, const guint8 *chunk, gsize len)
{
  if (conn->held_replies == NULL && proxy->hold_reply_match != NULL
      && memmem (chunk, len, proxy->hold_reply_match, strlen (proxy->hold_reply_match)) != NULL)
    {
      /* The request goes on; what the server answers on this connection waits. */
      conn->held_replies = g_byte_array_new ();
      g_clear_pointer (&proxy->hold_reply_match, g_free);
      proxy->held = TRUE;
      test_sync_broadcast (&proxy->sync);
    }
  if (conn->held == NULL && proxy->hold_match != NULL
      && memmem (chunk, len, proxy->hold_match, strlen (proxy->hold_match)) != NULL)
    {
      conn->held = g_byte_array_new ();
      g_clear_pointer (&proxy->hold_match, g_free);
      proxy->held = TRUE;
      test_sync_broadcast (&proxy->sync);
    }
  g_byte_array_append (conn->held != NULL ? conn->held : conn->to_server, chunk, (guint)len);
}

/* A chunk the server sent: dropped, delayed, or queued for the client. Mutex held. */
static void
from_server (TestProxy *proxy, ProxyConn *conn, const guint8 *chunk, gsize len)
{
  if (conn->held_replies != NULL)
    {
      g_byte_array_append (conn->held_replies, chunk, (guint)len);
      return;
    }
  if (proxy->drop > 0)
    {
      proxy->drop--;
      proxy->dropped++;
      return;
    }
  if (proxy->delay_us > 0 || !g_queue_is_empty (&conn->delayed))
    {
      DelayedChunk *delayed = g_new0 (DelayedChunk, 1);

      /* A chunk read after a shorter delay was set still waits for those before it. */
      delayed->due_us = g_get_monotonic_time () + proxy->delay_us;
      delayed->data = g_byte_array_sized_new ((guint)len);
      g_byte_array_append (delayed->data, chunk, (guint)len);
      g_queue_push_tail (&conn->delayed, delayed);
      return;
    }
  g_byte_array_append (conn->to_client, chunk, (guint)len);
}

/* Moves the delayed chunks that are due to the client's buffer. */
static void
move_due (ProxyConn *conn, gint64 now_us)
{
  while (!g_queue_is_empty (&conn->delayed))
    {
      DelayedChunk *head = g_queue_peek_head (&conn->delayed);

      if (head->due_us > now_us)
        break;
      g_queue_pop_head (&conn->delayed);
      g_byte_array_append (conn->to_client, head->data->data, head->data->len);
      g_byte_array_unref (head->data);
      g_free (head);
    }
}

/* The poll() timeout in milliseconds: until the first delayed chunk is due. */
static int
next_timeout_ms (TestProxy *proxy, gint64 now_us)
{
  gint64 first = G_MAXINT64;

  for (guint i = 0; i < proxy->conns->len; i++)
    {
      ProxyConn *conn = g_ptr_array_index (proxy->conns, i);
      DelayedChunk *head = g_queue_peek_head (&conn->delayed);

      if (head != NULL)
        first = MIN (first, head->due_us);
    }
  if (first == G_MAXINT64)
    return -1;
  if (first <= now_us)
    return 0;
  return (int)MIN ((first - now_us + 999) / 1000, G_MAXINT);
}

static void
remove_dead (TestProxy *proxy)
{
  for (guint i = proxy->conns->len; i > 0; i--)
    {
      ProxyConn *conn = g_ptr_array_index (proxy->conns, i - 1);

      if (conn->dead)
        {
          g_ptr_array_remove_index (proxy->conns, i - 1);
          conn_free (conn);
        }
    }
}

/* The poll set: 0 the wake-up pipe, 1 the listener, then client and server of each
 * connection. Mutex held. */
static struct pollfd *
fill_pollfds (TestProxy *proxy, GArray *fds)
{
  guint n_conns = proxy->conns->len;
  struct pollfd *pfd;

  g_array_set_size (fds, 2 + 2 * n_conns);
  pfd = (struct pollfd *)(void *)fds->data;
  pfd[0] = (struct pollfd){ proxy->wake[0], POLLIN, 0 };
  pfd[1] = (struct pollfd){ proxy->listener, POLLIN, 0 };
  for (guint i = 0; i < n_conns; i++)
    {
      ProxyConn *conn = g_ptr_array_index (proxy->conns, i);

      pfd[2 + 2 * i] = (struct pollfd){ conn->client_gone ? -1 : conn->client, POLLIN, 0 };
      if (conn->to_client->len > 0)
        pfd[2 + 2 * i].events |= POLLOUT;
      /* A server that hung up is not polled again (it would report POLLHUP forever);
       * the client still gets what it sent before. */
      pfd[3 + 2 * i] = (struct pollfd){ conn->server_eof ? -1 : conn->server, POLLIN, 0 };
      if (conn->to_server->len > 0)
        pfd[3 + 2 * i].events |= POLLOUT;
    }
  return pfd;
}

/* Reads what the first @n_conns connections have (none were added or removed since
 * the poll). Mutex held. */
static void
read_all (TestProxy *proxy, const struct pollfd *pfd, guint n_conns, guint8 *chunk)
{
  for (guint i = 0; i < n_conns; i++)
    {
      ProxyConn *conn = g_ptr_array_index (proxy->conns, i);
      gboolean broken = FALSE;
      gssize n;

      if (pfd[2 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR))
        {
          while ((n = read_chunk (conn->client, chunk, &broken)) > 0)
            from_client (proxy, conn, chunk, (gsize)n);
          /* The client is gone: nobody to answer. What it sent and the proxy holds
           * would have been in the server's socket buffer already: it still goes to
           * the server at release. */
          if (broken && conn->held != NULL)
            conn->client_gone = TRUE;
          else if (broken)
            conn->dead = TRUE;
        }
      broken = FALSE;
      if (!conn->dead && (pfd[3 + 2 * i].revents & (POLLIN | POLLHUP | POLLERR)))
        {
          while ((n = read_chunk (conn->server, chunk, &broken)) > 0)
            from_server (proxy, conn, chunk, (gsize)n);
          if (broken)
            conn->server_eof = TRUE; /* the client gets what came before */
        }
    }
}

/* Carries out release and kill requests. Mutex held. */
static void
handle_requests (TestProxy *proxy)
{
  if (proxy->release)
    {
      for (guint i = 0; i < proxy->conns->len; i++)
        {
          ProxyConn *conn = g_ptr_array_index (proxy->conns, i);

          if (conn->held != NULL)
            {
              g_byte_array_append (conn->to_server, conn->held->data, conn->held->len);
              g_clear_pointer (&conn->held, g_byte_array_unref);
            }
          if (conn->held_replies != NULL)
            {
              g_byte_array_append (conn->to_client, conn->held_replies->data,
                                   conn->held_replies->len);
              g_clear_pointer (&conn->held_replies, g_byte_array_unref);
            }
        }
      proxy->release = FALSE;
    }
  if (proxy->kill || proxy->stop)
    {
      for (guint i = 0; i < proxy->conns->len; i++)
        ((ProxyConn *)g_ptr_array_index (proxy->conns, i))->dead = TRUE;
      proxy->kill = FALSE;
    }
}

/* Writes what is due, and marks the connections that are over. Mutex held. */
static void
write_all (TestProxy *proxy)
{
  for (guint i = 0; i < proxy->conns->len; i++)
    {
      ProxyConn *conn = g_ptr_array_index (proxy->conns, i);

      if (conn->dead)
        continue;
      move_due (conn, g_get_monotonic_time ());
      if (conn->server_eof)
        g_byte_array_set_size (conn->to_server, 0);
      if (conn->client_gone)
        {
          g_byte_array_set_size (conn->to_client, 0);
          if (!flush (conn->server, conn->to_server)
              || (conn->held == NULL && conn->to_server->len == 0))
            conn->dead = TRUE;
        }
      else if (!flush (conn->server, conn->to_server) || !flush (conn->client, conn->to_client))
        conn->dead = TRUE;
      else if (conn->server_eof && conn->to_client->len == 0 && g_queue_is_empty (&conn->delayed))
        conn->dead = TRUE;
    }
}

static gpointer
proxy_main (gpointer data)
{
  TestProxy *proxy = data;
  guint8 *chunk = g_malloc (PROXY_READ_SIZE);
  GArray *fds = g_array_new (FALSE, TRUE, sizeof (struct pollfd));
  gboolean stop = FALSE;

  test_sync_lock (&proxy->sync);
  while (!stop)
    {
      int timeout = next_timeout_ms (proxy, g_get_monotonic_time ());
      guint n_conns = proxy->conns->len;
      struct pollfd *pfd = fill_pollfds (proxy, fds);
      guint64 requests;

      test_sync_unlock (&proxy->sync);
      if (poll (pfd, fds->len, timeout) < 0)
        g_assert_cmpint (errno, ==, EINTR);
      test_sync_lock (&proxy->sync);

      if (pfd[0].revents != 0)
        {
          char buf[64];
          while (read (proxy->wake[0], buf, sizeof buf) > 0)
            ;
        }
      read_all (proxy, pfd, n_conns, chunk);
      requests = proxy->requests;
      handle_requests (proxy);
      stop = proxy->stop;
      write_all (proxy);
      remove_dead (proxy);
      if (!stop)
        accept_connections (proxy);
      proxy->handled = requests;
      test_sync_broadcast (&proxy->sync);
    }
  test_sync_unlock (&proxy->sync);

  g_array_unref (fds);
  g_free (chunk);
  return NULL;
}

/* Makes a request (the caller has set its flag under the mutex, which it holds) and
 * waits for the proxy thread to carry it out. */
static void
request_and_wait (TestProxy *proxy)
{
  guint64 mine = ++proxy->requests;
  char byte = 0;

  g_assert_cmpint (write (proxy->wake[1], &byte, 1), ==, 1);
  while (proxy->handled < mine)
    test_sync_wait (&proxy->sync);
}

static void
wake (TestProxy *proxy)
{
  char byte = 0;
  /* A full pipe already wakes the thread. */
  if (write (proxy->wake[1], &byte, 1) < 0)
    g_assert_cmpint (errno, ==, EAGAIN);
}

static TestProxy *
proxy_start (TestProxy *proxy)
{
  struct sockaddr_in addr = { 0 };
  socklen_t len = sizeof addr;

  proxy->listener = socket (AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  g_assert_cmpint (proxy->listener, >=, 0);
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl (INADDR_LOOPBACK); /* never any other interface */
  g_assert_cmpint (bind (proxy->listener, (struct sockaddr *)&addr, sizeof addr), ==, 0);
  g_assert_cmpint (listen (proxy->listener, 64), ==, 0);
  g_assert_cmpint (getsockname (proxy->listener, (struct sockaddr *)&addr, &len), ==, 0);
  set_cloexec_nonblock (proxy->listener);
  proxy->port = ntohs (addr.sin_port);
  proxy->url = g_strdup_printf ("redis://127.0.0.1:%u", proxy->port);

  g_assert_cmpint (pipe2 (proxy->wake, O_CLOEXEC | O_NONBLOCK), ==, 0);
  test_sync_init (&proxy->sync);
  proxy->conns = g_ptr_array_new ();
  proxy->thread = g_thread_new ("test-proxy", proxy_main, proxy);
  return proxy;
}

TestProxy *
test_proxy_new_unix (const char *socket_path)
{
  TestProxy *proxy = g_new0 (TestProxy, 1);

  g_assert_nonnull (socket_path);
  g_assert_cmpuint (strlen (socket_path), <, sizeof (((struct sockaddr_un *)NULL)->sun_path));
  proxy->socket_path = g_strdup (socket_path);
  return proxy_start (proxy);
}

TestProxy *
test_proxy_new_tcp (guint16 port)
{
  TestProxy *proxy = g_new0 (TestProxy, 1);

  g_assert_cmpuint (port, !=, 0);
  proxy->target_port = port;
  return proxy_start (proxy);
}

const char *
test_proxy_get_url (TestProxy *proxy)
{
  return proxy->url;
}

guint16
test_proxy_get_port (TestProxy *proxy)
{
  return proxy->port;
}

void
test_proxy_hold_replies (TestProxy *proxy, const char *match)
{
  g_assert_nonnull (match);
  g_assert_cmpstr (match, !=, "");
  test_sync_lock (&proxy->sync);
  g_free (proxy->hold_reply_match);
  proxy->hold_reply_match = g_strdup (match);
  proxy->held = FALSE;
  test_sync_unlock (&proxy->sync);
}

void
test_proxy_hold_requests (TestProxy *proxy, const char *match)
{
  g_assert_nonnull (match);
  g_assert_cmpstr (match, !=, "");
  test_sync_lock (&proxy->sync);
  g_free (proxy->hold_match);
  proxy->hold_match = g_strdup (match);
  proxy->held = FALSE;
  test_sync_unlock (&proxy->sync);
}

gboolean
test_proxy_wait_held (TestProxy *proxy, gint64 timeout_ms)
{
  gint64 end_us = g_get_monotonic_time () + timeout_ms * G_TIME_SPAN_MILLISECOND;
  gboolean held;

  test_sync_lock (&proxy->sync);
  while (!proxy->held && test_sync_wait_until (&proxy->sync, end_us))
    ;
  held = proxy->held;
  test_sync_unlock (&proxy->sync);
  return held;
}

gsize
test_proxy_held_bytes (TestProxy *proxy)
{
  gsize n = 0;

  test_sync_lock (&proxy->sync);
  for (guint i = 0; i < proxy->conns->len; i++)
    {
      ProxyConn *conn = g_ptr_array_index (proxy->conns, i);

      if (conn->held != NULL)
        n += conn->held->len;
    }
  test_sync_unlock (&proxy->sync);
  return n;
}

void
test_proxy_release_held (TestProxy *proxy)
{
  test_sync_lock (&proxy->sync);
  g_clear_pointer (&proxy->hold_match, g_free);
  g_clear_pointer (&proxy->hold_reply_match, g_free);
  proxy->held = FALSE;
  proxy->release = TRUE;
  request_and_wait (proxy);
  test_sync_unlock (&proxy->sync);
}

void
test_proxy_drop_replies (TestProxy *proxy, guint n)
{
  test_sync_lock (&proxy->sync);
  proxy->drop += n;
  test_sync_unlock (&proxy->sync);
}

void
test_proxy_delay_replies (TestProxy *proxy, gint64 ms)
{
  g_assert_cmpint (ms, >=, 0);
  test_sync_lock (&proxy->sync);
  proxy->delay_us = ms * G_TIME_SPAN_MILLISECOND;
  test_sync_unlock (&proxy->sync);
  wake (proxy);
}

void
test_proxy_kill_connections (TestProxy *proxy)
{
  test_sync_lock (&proxy->sync);
  proxy->kill = TRUE;
  request_and_wait (proxy);
  test_sync_unlock (&proxy->sync);
}

/* Reads one of the proxy's counters under its mutex. */
static guint
read_count (TestProxy *proxy, const guint *field)
{
  guint n;

  test_sync_lock (&proxy->sync);
  n = *field;
  test_sync_unlock (&proxy->sync);
  return n;
}

guint
test_proxy_connections_accepted (TestProxy *proxy)
{
  return read_count (proxy, &proxy->accepted);
}

guint
test_proxy_connections_open (TestProxy *proxy)
{
  return read_count (proxy, &proxy->conns->len);
}

guint
test_proxy_replies_dropped (TestProxy *proxy)
{
  return read_count (proxy, &proxy->dropped);
}

void
test_proxy_free (TestProxy *proxy)
{
  if (proxy == NULL)
    return;
  test_sync_lock (&proxy->sync);
  proxy->stop = TRUE;
  request_and_wait (proxy);
  test_sync_unlock (&proxy->sync);
  g_thread_join (proxy->thread);

  g_assert_cmpuint (proxy->conns->len, ==, 0);
  g_ptr_array_unref (proxy->conns);
  test_sync_clear (&proxy->sync);
  close (proxy->listener);
  close (proxy->wake[0]);
  close (proxy->wake[1]);
  g_free (proxy->hold_match);
  g_free (proxy->hold_reply_match);
  g_free (proxy->socket_path);
  g_free (proxy->url);
  g_free (proxy);
}
