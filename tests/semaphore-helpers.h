/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* semaphore-helpers.h: what the semaphore tests share between semaphore.c (the
 * blocking calls, the size, other processes; the program's main) and semaphore-async.c
 * (redis_semaphore_acquire_async()): calls that assert success and the keys of a
 * semaphore. */
#ifndef REDIS_LOCK_TESTS_SEMAPHORE_HELPERS_H
#define REDIS_LOCK_TESTS_SEMAPHORE_HELPERS_H

#include "common.h"

/* The key of permit @index of the semaphore @name under TEST_REGISTRY_KEY (g_free()). */
char *permit_key (const char *name, guint index);
/* redis_lock_registry_obtain_semaphore(), asserting success. */
RedisSemaphore *obtain_semaphore (RedisLockRegistry *registry, const char *name, guint permits);
/* A permit taken within @wait_ms, or given back, asserting success. */
RedisPermit *acquire_ok (RedisSemaphore *semaphore, gint64 wait_ms);
void release_ok (RedisPermit *permit);
/* redis_semaphore_get_available(), asserting success. */
guint available (RedisSemaphore *semaphore);

/* semaphore-async.c: registers the tests of redis_semaphore_acquire_async(). */
void semaphore_add_async_tests (void);

#endif /* REDIS_LOCK_TESTS_SEMAPHORE_HELPERS_H */
