/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* version.c: the version of redislock, at build time (REDIS_LOCK_CHECK_VERSION and the
 * REDIS_LOCK_*_VERSION macros of the generated redislock-version.h) and at run time
 * (redis_lock_check_version() and the redis_lock_get_*_version() numbers).
 *
 * A program built against these headers and run with this library must see the same
 * version both ways, and each check must refuse what is newer than it (and, at run
 * time, another major version) while accepting the version itself and what is older.
 * The availability macros are checked by compiling programs in tests/availability.sh.
 */
#include "config.h"

#include <string.h>

#include <redislock/redislock.h>

#if !REDIS_LOCK_CHECK_VERSION(0, 1, 0)
#error "REDIS_LOCK_CHECK_VERSION(0, 1, 0) is false in version 0.1 or later"
#endif
#if REDIS_LOCK_CHECK_VERSION(REDIS_LOCK_MAJOR_VERSION + 1, 0, 0)
#error "REDIS_LOCK_CHECK_VERSION accepts the next major version"
#endif

static void
test_check_version_macro (void)
{
  g_test_summary ("REDIS_LOCK_CHECK_VERSION accepts the headers' version and older ones, "
                  "and refuses every newer major, minor or micro version.");
  g_assert_true (REDIS_LOCK_CHECK_VERSION (REDIS_LOCK_MAJOR_VERSION, REDIS_LOCK_MINOR_VERSION,
                                           REDIS_LOCK_MICRO_VERSION));
  g_assert_true (REDIS_LOCK_CHECK_VERSION (0, 0, 0));
  g_assert_false (REDIS_LOCK_CHECK_VERSION (REDIS_LOCK_MAJOR_VERSION, REDIS_LOCK_MINOR_VERSION,
                                            REDIS_LOCK_MICRO_VERSION + 1));
  g_assert_false (REDIS_LOCK_CHECK_VERSION (REDIS_LOCK_MAJOR_VERSION,
                                            REDIS_LOCK_MINOR_VERSION + 1, 0));
  g_assert_false (REDIS_LOCK_CHECK_VERSION (REDIS_LOCK_MAJOR_VERSION + 1, 0, 0));
}

static void
test_version_string (void)
{
  g_autofree char *expected = NULL;

  g_test_summary ("REDIS_LOCK_VERSION_S is the three numbers joined by dots.");
  expected = g_strdup_printf ("%d.%d.%d", REDIS_LOCK_MAJOR_VERSION, REDIS_LOCK_MINOR_VERSION,
                              REDIS_LOCK_MICRO_VERSION);
  g_assert_cmpstr (REDIS_LOCK_VERSION_S, ==, expected);
  g_assert_cmpint (REDIS_LOCK_VERSION_CUR_STABLE, ==,
                   G_ENCODE_VERSION (REDIS_LOCK_MAJOR_VERSION, REDIS_LOCK_MINOR_VERSION));
}

static void
test_run_time_version (void)
{
  g_test_summary ("The library this program runs with reports the version of the headers "
                  "it was built with.");
  g_assert_cmpuint (redis_lock_get_major_version (), ==, REDIS_LOCK_MAJOR_VERSION);
  g_assert_cmpuint (redis_lock_get_minor_version (), ==, REDIS_LOCK_MINOR_VERSION);
  g_assert_cmpuint (redis_lock_get_micro_version (), ==, REDIS_LOCK_MICRO_VERSION);
}

static void
test_check_version_function (void)
{
  guint major = redis_lock_get_major_version ();
  guint minor = redis_lock_get_minor_version ();
  guint micro = redis_lock_get_micro_version ();
  const char *message;

  g_test_summary ("redis_lock_check_version accepts the library's version and older minor "
                  "and micro versions of the same major, and says why it refuses a newer "
                  "one or another major version.");
  g_assert_null (redis_lock_check_version (REDIS_LOCK_MAJOR_VERSION, REDIS_LOCK_MINOR_VERSION,
                                           REDIS_LOCK_MICRO_VERSION));
  g_assert_null (redis_lock_check_version (major, minor, 0));
  g_assert_null (redis_lock_check_version (major, 0, 0));
  if (minor > 0)
    g_assert_null (redis_lock_check_version (major, minor - 1, G_MAXUINT));

  message = redis_lock_check_version (major, minor, micro + 1);
  g_assert_nonnull (message);
  g_assert_nonnull (strstr (message, "too old"));
  message = redis_lock_check_version (major, minor + 1, 0);
  g_assert_nonnull (message);
  g_assert_nonnull (strstr (message, "too old"));
  message = redis_lock_check_version (major + 1, 0, 0);
  g_assert_nonnull (message);
  g_assert_nonnull (strstr (message, "major"));
  if (major > 0)
    {
      message = redis_lock_check_version (major - 1, G_MAXUINT, G_MAXUINT);
      g_assert_nonnull (message);
      g_assert_nonnull (strstr (message, "too new"));
    }
}

int
main (int argc, char **argv)
{
  g_test_init (&argc, &argv, NULL);
  g_test_add_func ("/version/check-version-macro", test_check_version_macro);
  g_test_add_func ("/version/string", test_version_string);
  g_test_add_func ("/version/run-time", test_run_time_version);
  g_test_add_func ("/version/check-version-function", test_check_version_function);
  return g_test_run ();
}
