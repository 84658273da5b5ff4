/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* key-index.h: "PREFIX:N", the name or key of the N-th member of a family's key (a
 * semaphore's permits), formatted on the acquisition's path without printf: two
 * g_strdup_printf() calls were a fifth of the instructions of a permit's acquire and
 * release. One inline function for both sides of the store seam: semaphore.c names
 * the permit's lease with it, the Redis store the permit's key.
 */
#ifndef RL_KEY_INDEX_H
#define RL_KEY_INDEX_H

#include <string.h>
#include <glib.h>

/* "@prefix:@index" in @buf (@size bytes) when it fits, else in memory allocated into
 * *@heap, which the caller frees (it stays NULL otherwise). Returns the string. */
static inline const char *
rl_key_index (char *buf, gsize size, char **heap, const char *prefix, guint index)
{
  gsize len = strlen (prefix);
  char digits[16];
  int n = 0;
  char *p;

  do
    digits[n++] = (char) ('0' + index % 10);
  while ((index /= 10) != 0);
  *heap = NULL;
  if (len + 1 + (gsize) n + 1 > size)
    buf = *heap = g_malloc (len + 1 + (gsize) n + 1);
  memcpy (buf, prefix, len);
  p = buf + len;
  *p++ = ':';
  while (n > 0)
    *p++ = digits[--n];
  *p = '\0';
  return buf;
}

#endif /* RL_KEY_INDEX_H */
