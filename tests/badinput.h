/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* badinput.h: the row type of the bad-input table and the functions its rows run
 * (badinput-calls.c), shared with the table itself (badinput.c). */
#ifndef REDIS_LOCK_TESTS_BADINPUT_H
#define REDIS_LOCK_TESTS_BADINPUT_H

#include "common.h"

/* The outcome a row expects, besides the REDIS_LOCK_ERROR codes. */
#define EXPECT_SUCCESS (-1)
#define EXPECT_CANCELLED (-2)
#define EXPECT_UNREACHABLE (-3) /* INVALID or CONNECTION, never a registry */

/* The registry key used by every row. */
#define KEY TEST_REGISTRY_KEY

/* A private server for rows that need one; the subprocess of a critical row finds the
 * parent's server through this variable. */
#define URL_ENV "REDISLOCK_BADINPUT_URL"

typedef struct _BadCase BadCase;

/* What a row gets to work with: a server (when the row has config or needs one), a
 * registry on it, and a raw connection to look at keys. */
typedef struct
{
  RedisLockTestServer *server;
  RedisLockRegistry *registry;
  redisContext *redis;
  char *url;
} Env;

struct _BadCase
{
  const char *path;    /* under /badinput/ */
  const char *summary; /* for g_test_summary() */
  void (*run) (Env *env, const BadCase *c);
  const char *arg;           /* a URL (with %s for the server's socket path), a name, a pattern */
  gint code;                 /* a RedisLockErrorCode, or EXPECT_* */
  const char *const *config; /* extra redis.conf lines */
  gsize len;                 /* names made of @len bytes */
  void (*call) (RedisLockRegistry *registry); /* critical rows: the faulty call */
  gboolean needs_server;
};

void env_setup (Env *env, const BadCase *c);
void env_teardown (Env *env);
void run_url (Env *env, const BadCase *c);
void run_truncated_socket_path (Env *env, const BadCase *c);
void run_registry_key (Env *env, const BadCase *c);
void run_name (Env *env, const BadCase *c);
void run_glob_name_wakeup (Env *env, const BadCase *c);
void run_ttl_negative (Env *env, const BadCase *c);
void run_ttl_zero (Env *env, const BadCase *c);
void run_unlock_not_held (Env *env, const BadCase *c);
void run_unlock_twice (Env *env, const BadCase *c);
void run_unlock_other_thread (Env *env, const BadCase *c);
void run_renew (Env *env, const BadCase *c);
void run_renew_negative_ttl (Env *env, const BadCase *c);
void run_cancelled (Env *env, const BadCase *c);
void run_cache_full (Env *env, const BadCase *c);
void run_closed (Env *env, const BadCase *c);
void run_forked (Env *env, const BadCase *c);
void run_unref_with_holds (Env *env, const BadCase *c);
void run_critical (Env *env, const BadCase *c);
void call_obtain_null (RedisLockRegistry *r);
void call_lock_null (RedisLockRegistry *r);
void call_try_lock_for_null (RedisLockRegistry *r);
void call_try_lock_full_null (RedisLockRegistry *r);
void call_unlock_null (RedisLockRegistry *r);
void call_get_name_null (RedisLockRegistry *r);
void call_lock_ref_null (RedisLockRegistry *r);
void call_renew_null (RedisLockRegistry *r);
void call_registry_ref_null (RedisLockRegistry *r);
void call_close_null (RedisLockRegistry *r);
void call_client_id_null (RedisLockRegistry *r);
void call_set_ttl_zero (RedisLockRegistry *r);
void call_set_ttl_negative (RedisLockRegistry *r);
void call_set_capacity_zero (RedisLockRegistry *r);
void call_set_idle_negative (RedisLockRegistry *r);
void call_set_connect_timeout_zero (RedisLockRegistry *r);
void call_set_command_timeout_negative (RedisLockRegistry *r);
void call_set_wait_mode_invalid (RedisLockRegistry *r);
void call_get_stats_null (RedisLockRegistry *r);
void call_error_already_set (RedisLockRegistry *r);
void call_unref_null (RedisLockRegistry *r);
void call_zero_idle_and_disabled_watchdog (RedisLockRegistry *r);

#endif /* REDIS_LOCK_TESTS_BADINPUT_H */
