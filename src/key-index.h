/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* key-index.h: decimal numbers written without printf, on the hot paths: a command's
 * lengths (transport.c), numeric arguments (rl_format_uint()), and "PREFIX:N", the
 * name or key of the N-th member of a family's key (a semaphore's permits: two
 * g_strdup_printf() calls were a fifth of the instructions of a permit's acquire and
 * release). Header-only, for both sides of the store seam: semaphore.c names the
 * permit's lease with it, the Redis store the permit's key.
 */
#ifndef RL_KEY_INDEX_H
#define RL_KEY_INDEX_H

#include <string.h>
#include <glib.h>

/* Writes the decimal digits of @value at @p; returns the end (no NUL). The one digit
 * writer of the library: commands' lengths (transport.c), numeric arguments
 * (rl_format_uint()) and the names below. */
static inline char *
rl_put_uint (char *p, guint64 value)
{
  char digits[24];
  int n = 0;

  do
    digits[n++] = (char) ('0' + value % 10);
  while ((value /= 10) != 0);
  while (n > 0)
    *p++ = digits[--n];
  return p;
}

/* "@prefix:@index" in @buf (@size bytes) when it fits, else in memory allocated into
 * *@heap, which the caller frees (it stays NULL otherwise). Returns the string. */
static inline const char *
rl_key_index (char *buf, gsize size, char **heap, const char *prefix, guint index)
{
  gsize len = strlen (prefix);
  gsize need = len + 1 + 10 + 1; /* a guint has at most 10 digits */
  char *p;

  *heap = NULL;
  if (need > size)
    buf = *heap = g_malloc (need);
  memcpy (buf, prefix, len);
  p = buf + len;
  *p++ = ':';
  *rl_put_uint (p, index) = '\0';
  return buf;
}

#endif /* RL_KEY_INDEX_H */
