/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* lock-service.c: a GMainLoop service that takes a lock asynchronously per request.
 *
 * Two instances of a tiny line-based TCP service (each with its own registry, as two
 * processes would have) listen on loopback ports and share one ledger file. A request
 * `add N` takes the lock "example:ledger" with redis_lock_lock_async(), adds N to the
 * ledger with an asynchronous write, releases the lock with redis_lock_unlock_async()
 * and answers with the new total; the main loop never blocks. The write gets the
 * lease cancellable, so a lost lease aborts it, and a g_cancellable_source_new() on
 * that cancellable reports the loss in the loop. A hold belongs to the thread, and
 * both services run in this one thread, so each service handles its own requests one
 * at a time (a queue); the lock excludes the other service, and any other process.
 *
 * Client threads send CLIENTS x REQUESTS requests, alternating between the services;
 * the program checks that the ledger ends at the exact sum. Uses $REDIS_URL when set,
 * otherwise starts a throwaway redis-server (redislock-test.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gio/gio.h>
#include <glib/gstdio.h>
#include <redislock/redislock.h>
#include <redislock/redislock-test.h>

#define SERVICES 2
#define CLIENTS 4
#define REQUESTS 10

typedef struct
{
  int id;
  RedisLockRegistry *registry;
  RedisLock *lock;
  GSocketService *listener;
  guint16 port;
  GFile *ledger;
  GQueue requests; /* Request, waiting for their turn */
  gboolean busy;   /* a request holds or is taking the lock */
} Service;

typedef struct
{
  Service *service;
  GSocketConnection *connection;
  GDataInputStream *in;
  gint64 amount;
  char reply[64];
  char *contents;    /* the ledger's new contents, while being written */
  GSource *lost;     /* reports a lost lease while the lock is held */
} Request;

static GMainLoop *loop;
static gint clients_left = CLIENTS;

static void read_request (Request *r);
static void serve_next (Service *s);

static void
request_free (Request *r)
{
  g_object_unref (r->in);
  g_object_unref (r->connection);
  g_free (r->contents);
  g_free (r);
}

static void
on_replied (GObject *stream, GAsyncResult *result, gpointer data)
{
  Request *r = data;
  g_autoptr (GError) error = NULL;

  if (!g_output_stream_write_all_finish (G_OUTPUT_STREAM (stream), result, NULL, &error))
    {
      g_printerr ("service %d: reply: %s\n", r->service->id, error->message);
      request_free (r);
      return;
    }
  read_request (r); /* the next request of this connection */
}

static void
reply (Request *r)
{
  GOutputStream *out = g_io_stream_get_output_stream (G_IO_STREAM (r->connection));

  g_output_stream_write_all_async (out, r->reply, strlen (r->reply), G_PRIORITY_DEFAULT, NULL,
                                   on_replied, r);
}

/* The request's turn is over: answer it, and let the service's next request in. */
static void
finish_request (Request *r)
{
  Service *s = r->service;

  reply (r);
  s->busy = FALSE;
  serve_next (s);
}

static void
on_unlocked (GObject *source, GAsyncResult *result, gpointer data)
{
  Request *r = data;
  g_autoptr (GError) error = NULL;

  if (!redis_lock_unlock_finish (r->service->lock, result, &error))
    /* A lost lease, say: the write may have raced another holder's. */
    g_snprintf (r->reply, sizeof r->reply, "error %s\n", error->message);
  finish_request (r);
}

static gboolean
on_lease_lost (GCancellable *cancellable, gpointer data)
{
  Request *r = data;

  g_printerr ("service %d: lease of “%s” lost; the write in progress is cancelled\n",
              r->service->id, redis_lock_get_name (r->service->lock));
  return G_SOURCE_REMOVE;
}

static void
on_written (GObject *file, GAsyncResult *result, gpointer data)
{
  Request *r = data;
  g_autoptr (GError) error = NULL;

  if (!g_file_replace_contents_finish (G_FILE (file), result, NULL, &error))
    g_snprintf (r->reply, sizeof r->reply, "error %s\n", error->message);
  /* The loss of a later hold is no concern of this request's. */
  g_source_destroy (r->lost);
  g_clear_pointer (&r->lost, g_source_unref);
  redis_lock_unlock_async (r->service->lock, NULL, on_unlocked, r);
}

static void
on_locked (GObject *source, GAsyncResult *result, gpointer data)
{
  Request *r = data;
  Service *s = r->service;
  g_autoptr (GError) error = NULL;
  g_autofree char *old = NULL;
  GCancellable *lease;
  gint64 total;

  if (!redis_lock_lock_finish (s->lock, result, &error))
    {
      g_snprintf (r->reply, sizeof r->reply, "error %s\n",
                  error != NULL ? error->message : "lock not acquired in time");
      finish_request (r);
      return;
    }

  /* This thread holds the lock until the unlock below, across the write. */
  lease = redis_lock_get_lease_cancellable (s->lock);
  r->lost = g_cancellable_source_new (lease);
  g_source_set_callback (r->lost, G_SOURCE_FUNC (on_lease_lost), r, NULL);
  g_source_attach (r->lost, NULL);

  total = g_file_load_contents (s->ledger, NULL, &old, NULL, NULL, NULL)
              ? g_ascii_strtoll (old, NULL, 10)
              : 0;
  total += r->amount;
  r->contents = g_strdup_printf ("%" G_GINT64_FORMAT "\n", total);
  g_snprintf (r->reply, sizeof r->reply, "total %" G_GINT64_FORMAT "\n", total);
  g_file_replace_contents_async (s->ledger, r->contents, strlen (r->contents), NULL, FALSE,
                                 G_FILE_CREATE_NONE, lease, on_written, r);
}

static void
serve_next (Service *s)
{
  Request *r;

  if (s->busy || (r = g_queue_pop_head (&s->requests)) == NULL)
    return;
  s->busy = TRUE;
  redis_lock_lock_async (s->lock, 5000, 0, NULL, on_locked, r);
}

static void
on_line (GObject *stream, GAsyncResult *result, gpointer data)
{
  Request *r = data;
  g_autoptr (GError) error = NULL;
  g_autofree char *line = g_data_input_stream_read_line_finish (G_DATA_INPUT_STREAM (stream),
                                                                result, NULL, &error);

  if (line == NULL)
    {
      /* End of the connection (or an error). */
      if (error != NULL)
        g_printerr ("service %d: read: %s\n", r->service->id, error->message);
      request_free (r);
      return;
    }
  if (!g_str_has_prefix (line, "add ")
      || !g_ascii_string_to_signed (line + 4, 10, 0, 1000000, &r->amount, NULL))
    {
      g_strlcpy (r->reply, "error expected: add N\n", sizeof r->reply);
      reply (r);
      return;
    }
  g_queue_push_tail (&r->service->requests, r);
  serve_next (r->service);
}

static void
read_request (Request *r)
{
  g_data_input_stream_read_line_async (r->in, G_PRIORITY_DEFAULT, NULL, on_line, r);
}

static gboolean
on_incoming (GSocketService *listener, GSocketConnection *connection, GObject *source,
             gpointer data)
{
  Request *r = g_new0 (Request, 1);

  r->service = data;
  r->connection = g_object_ref (connection);
  r->in = g_data_input_stream_new (g_io_stream_get_input_stream (G_IO_STREAM (connection)));
  read_request (r);
  return TRUE;
}

static gboolean
quit_when_done (gpointer data)
{
  if (g_atomic_int_dec_and_test (&clients_left))
    g_main_loop_quit (loop);
  return G_SOURCE_REMOVE;
}

/* A client: REQUESTS requests, alternating between the services, one connection each. */
static gpointer
client_main (gpointer data)
{
  Service *services = data;
  g_autoptr (GSocketClient) client = g_socket_client_new ();
  g_autoptr (GError) error = NULL;

  for (int i = 0; i < REQUESTS; i++)
    {
      Service *s = &services[i % SERVICES];
      g_autoptr (GSocketConnection) c = g_socket_client_connect_to_host (client, "127.0.0.1",
                                                                        s->port, NULL, &error);
      g_autoptr (GDataInputStream) in = NULL;
      g_autofree char *reply = NULL;

      if (c == NULL
          || !g_output_stream_write_all (g_io_stream_get_output_stream (G_IO_STREAM (c)),
                                         "add 1\n", 6, NULL, NULL, &error))
        g_error ("client: %s", error->message);
      in = g_data_input_stream_new (g_io_stream_get_input_stream (G_IO_STREAM (c)));
      reply = g_data_input_stream_read_line (in, NULL, NULL, &error);
      if (reply == NULL || !g_str_has_prefix (reply, "total "))
        g_error ("client: unexpected reply %s", reply != NULL ? reply : error->message);
    }
  g_idle_add (quit_when_done, NULL);
  return NULL;
}

int
main (void)
{
  g_autoptr (RedisLockTestServer) server = NULL;
  g_autoptr (GError) error = NULL;
  g_autofree char *dir = NULL;
  g_autofree char *ledger_path = NULL;
  g_autofree char *total = NULL;
  const char *url = g_getenv ("REDIS_URL");
  Service services[SERVICES] = { { 0 } };
  GThread *clients[CLIENTS];
  gint64 expected = CLIENTS * REQUESTS;
  gboolean exact;

  if (url == NULL)
    {
      server = redis_lock_test_server_new (NULL, &error);
      if (server == NULL)
        {
          fprintf (stderr, "lock-service: %s (set REDIS_URL to use a running server)\n",
                   error->message);
          return 1;
        }
      url = redis_lock_test_server_get_url (server);
    }
  dir = g_dir_make_tmp ("lock-service-XXXXXX", &error);
  if (dir == NULL)
    g_error ("%s", error->message);
  ledger_path = g_build_filename (dir, "ledger", NULL);
  loop = g_main_loop_new (NULL, FALSE);

  for (int i = 0; i < SERVICES; i++)
    {
      Service *s = &services[i];
      g_autoptr (GInetAddress) loopback = g_inet_address_new_loopback (G_SOCKET_FAMILY_IPV4);
      g_autoptr (GSocketAddress) any_port = g_inet_socket_address_new (loopback, 0);
      g_autoptr (GSocketAddress) bound = NULL;

      s->id = i;
      s->ledger = g_file_new_for_path (ledger_path);
      s->registry = redis_lock_registry_new (url, "example", &error);
      if (s->registry == NULL)
        g_error ("registry: %s", error->message);
      s->lock = redis_lock_registry_obtain (s->registry, "example:ledger", &error);
      if (s->lock == NULL)
        g_error ("obtain: %s", error->message);
      s->listener = g_socket_service_new ();
      if (!g_socket_listener_add_address (G_SOCKET_LISTENER (s->listener), any_port,
                                          G_SOCKET_TYPE_STREAM, G_SOCKET_PROTOCOL_TCP, NULL,
                                          &bound, &error))
        g_error ("listen: %s", error->message);
      s->port = g_inet_socket_address_get_port (G_INET_SOCKET_ADDRESS (bound));
      g_signal_connect (s->listener, "incoming", G_CALLBACK (on_incoming), s);
      printf ("service %d on 127.0.0.1:%u, registry %s\n", i, s->port,
              redis_lock_registry_get_client_id (s->registry));
    }

  for (int i = 0; i < CLIENTS; i++)
    clients[i] = g_thread_new ("client", client_main, services);
  g_main_loop_run (loop);
  for (int i = 0; i < CLIENTS; i++)
    g_thread_join (clients[i]);

  if (!g_file_get_contents (ledger_path, &total, NULL, &error))
    g_error ("%s", error->message);
  exact = g_ascii_strtoll (total, NULL, 10) == expected;
  printf ("%d clients x %d requests: ledger = %" G_GINT64_FORMAT " (expected %" G_GINT64_FORMAT
          ")\n",
          CLIENTS, REQUESTS, g_ascii_strtoll (total, NULL, 10), expected);

  for (int i = 0; i < SERVICES; i++)
    {
      g_socket_service_stop (services[i].listener);
      g_socket_listener_close (G_SOCKET_LISTENER (services[i].listener));
      g_object_unref (services[i].listener);
      redis_lock_unref (services[i].lock);
      redis_lock_registry_unref (services[i].registry);
      g_object_unref (services[i].ledger);
    }
  g_main_loop_unref (loop);
  g_unlink (ledger_path);
  g_rmdir (dir);
  return exact ? 0 : 1;
}
