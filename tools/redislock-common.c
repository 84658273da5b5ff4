/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-common.c: what several commands of the redislock tool share.
 *
 * Messages on stderr (always redacted), durations as the options spell them, escaping
 * of names and owners read from Redis for a terminal, whole reads and writes on pipes,
 * the exit status an error maps to, and a plain hiredis connection for the demo's
 * non-atomic purchases, its URL parsed by the library's private parser (url.h). Kept
 * apart from the commands so that each command file holds only that command.
 */
#include "config.h"

#include "redislock-tool.h"
#include "url.h"
#include "report.h"

#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* ------------------------------------------------------------------------------------ */
/* Small helpers                                                                         */

char *
format_redacted (const char *format, va_list ap)
{
  g_autofree char *msg = g_strdup_vprintf (format, ap);

  return redact_text (msg);
}

/* Prints "redislock: MESSAGE" on stderr, with any password of the Redis URL hidden. */
void
die_message (const char *format, ...)
{
  va_list ap;
  g_autofree char *shown = NULL;

  va_start (ap, format);
  shown = format_redacted (format, ap);
  va_end (ap);
  fprintf (stderr, "redislock: %s\n", shown);
}

gint64
monotonic_ns (void)
{
  struct timespec ts;

  clock_gettime (CLOCK_MONOTONIC, &ts);
  return (gint64) ts.tv_sec * G_GINT64_CONSTANT (1000000000) + ts.tv_nsec;
}
/* Parses a duration: a non-negative decimal number followed by an optional unit, ms, s,
 * m or h; without a unit the number is seconds (as for flock -w, sleep, timeout). The
 * result is rounded to whole milliseconds. */
gboolean
parse_duration (const char *text, gint64 *out_ms)
{
  const char *p = text;
  const char *unit;
  gboolean digits = FALSE, dot = FALSE;
  double value, factor;
  g_autofree char *number = NULL;

  if (text == NULL)
    return FALSE;
  for (; *p; p++)
    {
      if (g_ascii_isdigit (*p))
        digits = TRUE;
      else if (*p == '.' && !dot)
        dot = TRUE;
      else
        break;
    }
  if (!digits)
    return FALSE;
  unit = p;
  if (*unit == '\0' || strcmp (unit, "s") == 0)
    factor = 1000.0;
  else if (strcmp (unit, "ms") == 0)
    factor = 1.0;
  else if (strcmp (unit, "m") == 0)
    factor = 60000.0;
  else if (strcmp (unit, "h") == 0)
    factor = 3600000.0;
  else
    return FALSE;
  number = g_strndup (text, (gsize) (unit - text));
  value = g_ascii_strtod (number, NULL) * factor;
  if (!isfinite (value) || value > (double) MAX_DURATION_MS)
    return FALSE;
  *out_ms = (gint64) llround (value);
  return TRUE;
}

/* "500ms", "10s", "1.5s", "2m", "1h": the shortest exact-enough spelling. */
char *
format_duration (gint64 ms)
{
  if (ms < 1000)
    return g_strdup_printf ("%" G_GINT64_FORMAT "ms", ms);
  if (ms % 3600000 == 0)
    return g_strdup_printf ("%" G_GINT64_FORMAT "h", ms / 3600000);
  if (ms % 60000 == 0)
    return g_strdup_printf ("%" G_GINT64_FORMAT "m", ms / 60000);
  if (ms % 1000 == 0)
    return g_strdup_printf ("%" G_GINT64_FORMAT "s", ms / 1000);
  return g_strdup_printf ("%.3gs", (double) ms / 1000.0);
}

/* A name or owner for a terminal: printable UTF-8 as is, anything else escaped. */
char *
escape_for_display (const char *s)
{
  GString *out = g_string_new (NULL);
  const char *p = s;

  while (*p)
    {
      gunichar c = g_utf8_get_char_validated (p, -1);

      if (c == (gunichar) -1 || c == (gunichar) -2)
        {
          g_string_append_printf (out, "\\x%02x", (guchar) *p);
          p++;
          continue;
        }
      if (c == '\\')
        g_string_append (out, "\\\\");
      else if (c < 0x20 || c == 0x7f || !g_unichar_isprint (c))
        g_string_append_printf (out, c < 0x100 ? "\\x%02x" : "\\u%04x", c);
      else
        g_string_append_len (out, p, g_utf8_next_char (p) - p);
      p = g_utf8_next_char (p);
    }
  return g_string_free (out, FALSE);
}

gboolean
write_all (int fd, const void *buf, gsize len)
{
  const char *p = buf;

  while (len > 0)
    {
      ssize_t n = write (fd, p, len);

      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        return FALSE;
      p += n;
      len -= (gsize) n;
    }
  return TRUE;
}

/* Reads up to @len bytes, fewer only at end of file. */
gssize
read_all (int fd, void *buf, gsize len)
{
  char *p = buf;
  gsize got = 0;

  while (got < len)
    {
      ssize_t n = read (fd, p + got, len - got);

      if (n < 0 && errno == EINTR)
        continue;
      if (n < 0)
        return -1;
      if (n == 0)
        break;
      got += (gsize) n;
    }
  return (gssize) got;
}
gboolean
signal_is_ignored (int signum)
{
  struct sigaction sa;

  return sigaction (signum, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN;
}

/* ------------------------------------------------------------------------------------ */
/* A plain Redis connection, for the demo                                               */

/* Sends one command (binary-safe arguments) and returns its reply; a Redis error reply
 * is returned too (type REDIS_REPLY_ERROR): callers decide. NULL on I/O failure. */
static redisReply *
redis_call (redisContext *c, GError **error, int argc, const char **argv, const size_t *lens)
{
  redisReply *reply = redisCommandArgv (c, argc, argv, lens);

  if (reply == NULL)
    g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION, "Redis I/O error: %s",
                 c->errstr[0] ? c->errstr : "connection lost");
  return reply;
}

/* Like redis_call() with C-string arguments, and a Redis error reply is a GError. */
redisReply *
redis_callv (redisContext *c, GError **error, ...)
{
  const char *argv[8];
  int argc = 0;
  const char *arg;
  va_list ap;
  redisReply *reply;

  va_start (ap, error);
  while ((arg = va_arg (ap, const char *)) != NULL && argc < (int) G_N_ELEMENTS (argv))
    argv[argc++] = arg;
  va_end (ap);
  reply = redis_call (c, error, argc, argv, NULL);
  if (reply != NULL && reply->type == REDIS_REPLY_ERROR)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_REDIS, "Redis %s: %s", argv[0],
                   reply->str);
      freeReplyObject (reply);
      return NULL;
    }
  return reply;
}

/* Connects to @url (parsed by rl_conn_config_parse(), as the library does), then AUTH
 * and SELECT as it says. */
redisContext *
redis_open (const char *url, GError **error)
{
  RlConnConfig a;
  struct timeval tv = { REDIS_TIMEOUT_MS / 1000, (REDIS_TIMEOUT_MS % 1000) * 1000 };
  redisContext *c;
  redisReply *reply = NULL;
  g_autofree char *where = NULL;

  if (!rl_conn_config_parse (url, &a, error))
    return NULL;
  where = rl_conn_config_describe (&a);
  c = a.path != NULL ? redisConnectUnixWithTimeout (a.path, tv)
                     : redisConnectWithTimeout (a.host, a.port, tv);
  if (c == NULL || c->err)
    {
      g_set_error (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_CONNECTION,
                   "cannot connect to Redis at %s: %s", where, c ? c->errstr : "out of memory");
      goto fail;
    }
  redisSetTimeout (c, tv);
  if (a.password != NULL)
    {
      reply = a.username ? redis_callv (c, error, "AUTH", a.username, a.password, NULL)
                         : redis_callv (c, error, "AUTH", a.password, NULL);
      if (reply == NULL)
        goto fail;
      freeReplyObject (reply);
    }
  if (a.db != 0)
    {
      g_autofree char *db = g_strdup_printf ("%d", a.db);

      reply = redis_callv (c, error, "SELECT", db, NULL);
      if (reply == NULL)
        goto fail;
      freeReplyObject (reply);
    }
  rl_conn_config_clear (&a);
  return c;

fail:
  if (c != NULL)
    redisFree (c);
  rl_conn_config_clear (&a);
  return NULL;
}

int
exit_status_for_error (const GError *error)
{
  if (g_error_matches (error, REDIS_LOCK_ERROR, REDIS_LOCK_ERROR_INVALID))
    return EXIT_USAGE;
  return EXIT_REDIS;
}

/* The holder of a lease: its value split into host and pid ------------------------ */

static gboolean
all_digits (const char *s, gsize n)
{
  gsize i;

  for (i = 0; i < n; i++)
    if (!g_ascii_isdigit (s[i]))
      return FALSE;
  return n > 0;
}

static gboolean
all_hex (const char *s, gsize n)
{
  gsize i;

  for (i = 0; i < n; i++)
    if (!g_ascii_isxdigit (s[i]))
      return FALSE;
  return n > 0;
}

/* The colon last before @end in @s, or NULL. */
static const char *
colon_before (const char *s, const char *end)
{
  while (end > s)
    if (*--end == ':')
      return end;
  return NULL;
}

/* Splits @owner up to @end, `host:pid:tail`, into host and pid. */
static gboolean
split_host_pid (const char *owner, const char *end, char **host, gint64 *pid)
{
  const char *last = colon_before (owner, end);
  const char *prev = last != NULL ? colon_before (owner, last) : NULL;
  g_autofree char *pid_text = NULL;

  if (last == NULL || prev == NULL || prev == owner || last + 1 == end)
    return FALSE;
  pid_text = g_strndup (prev + 1, (gsize) (last - prev - 1));
  if (!all_digits (pid_text, strlen (pid_text))
      || !g_ascii_string_to_signed (pid_text, 10, 0, G_MAXINT64, pid, NULL))
    return FALSE;
  *host = g_strndup (owner, (gsize) (prev - owner));
  return TRUE;
}

gboolean
split_client_id (const char *owner, char **host, gint64 *pid)
{
  const char *end, *last, *prev;
  gboolean numbered;

  if (owner == NULL)
    return FALSE;
  end = owner + strlen (owner);
  last = colon_before (owner, end);
  numbered = last != NULL && all_digits (last + 1, (gsize) (end - last - 1));
  prev = numbered ? colon_before (owner, last) : NULL;
  /* host:pid:<32 hex>:N first; host:pid:anything; then host:pid:hex:N with a short hex */
  if (prev != NULL && last - prev - 1 == 32 && all_hex (prev + 1, 32)
      && split_host_pid (owner, last, host, pid))
    return TRUE;
  if (split_host_pid (owner, end, host, pid))
    return TRUE;
  return prev != NULL && all_hex (prev + 1, (gsize) (last - prev - 1))
         && split_host_pid (owner, last, host, pid);
}

void
append_waiters_json (GString *out, GPtrArray *waiters)
{
  g_string_append (out, ", \"waiters\": [");
  for (guint j = 0; j < waiters->len; j++)
    {
      const RedisLockWaiterInfo *w = g_ptr_array_index (waiters, j);

      g_string_append (out, j ? ", {\"host\": " : "{\"host\": ");
      rl_json_append_string (out, w->host);
      g_string_append_printf (out, ", \"pid\": %" G_GINT64_FORMAT ", \"since_us\": %" G_GINT64_FORMAT
                                   ", \"waiter\": ",
                              w->pid, w->since_us);
      rl_json_append_string (out, w->waiter);
      g_string_append_c (out, '}');
    }
  g_string_append_c (out, ']');
}

void
append_queue_json (GString *out, GPtrArray *queue)
{
  g_string_append (out, ", \"queue\": [");
  for (guint j = 0; j < queue->len; j++)
    {
      const RedisLockQueueInfo *q = g_ptr_array_index (queue, j);

      g_string_append_printf (out, "%s{\"position\": %u, \"host\": ", j ? ", " : "", q->position);
      rl_json_append_string (out, q->host);
      g_string_append_printf (out, ", \"pid\": %" G_GINT64_FORMAT ", \"since_us\": %" G_GINT64_FORMAT
                                   ", \"client_id\": ",
                              q->pid, q->since_us);
      rl_json_append_string (out, q->client_id);
      g_string_append_c (out, '}');
    }
  g_string_append_c (out, ']');
}

void
append_holder_json (GString *out, gboolean held, const char *owner, gint64 ttl_ms)
{
  g_autofree char *host = NULL;
  gint64 pid = 0;
  gboolean split = split_client_id (owner, &host, &pid);

  g_string_append_printf (out, ", \"held\": %s, \"owner\": ", held ? "true" : "false");
  rl_json_append_string (out, owner);
  g_string_append (out, ", \"host\": ");
  rl_json_append_string (out, split ? host : NULL);
  if (split)
    g_string_append_printf (out, ", \"pid\": %" G_GINT64_FORMAT, pid);
  else
    g_string_append (out, ", \"pid\": null");
  if (held && ttl_ms >= 0)
    g_string_append_printf (out, ", \"ttl_ms\": %" G_GINT64_FORMAT, ttl_ms);
  else
    g_string_append (out, ", \"ttl_ms\": null");
}
