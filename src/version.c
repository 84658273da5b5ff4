/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* version.c: the version of the library a program runs with.
 *
 * The numbers are compiled in from the generated redislock-version.h, so they are the
 * library's own, which may differ from the headers a program was built with; that
 * difference is what redis_lock_check_version() is for, as glib_check_version() is
 * for GLib.
 */
#include "config.h"

#include "redislock/redislock.h"

guint
redis_lock_get_major_version (void)
{
  return REDIS_LOCK_MAJOR_VERSION;
}

guint
redis_lock_get_minor_version (void)
{
  return REDIS_LOCK_MINOR_VERSION;
}

guint
redis_lock_get_micro_version (void)
{
  return REDIS_LOCK_MICRO_VERSION;
}

const char *
redis_lock_check_version (guint required_major, guint required_minor, guint required_micro)
{
  /* Variables, not the macros: with a major version of 0 the compiler would call
   * `required_major < 0` always false. */
  guint major = redis_lock_get_major_version ();
  guint minor = redis_lock_get_minor_version ();
  guint micro = redis_lock_get_micro_version ();

  if (required_major > major)
    return "redislock version too old (major mismatch)";
  if (required_major < major)
    return "redislock version too new (major mismatch)";
  if (required_minor > minor)
    return "redislock version too old (minor mismatch)";
  if (required_minor == minor && required_micro > micro)
    return "redislock version too old (micro mismatch)";
  return NULL;
}
