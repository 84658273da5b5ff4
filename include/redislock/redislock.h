/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock.h: the one header applications include.
 *
 * redislock gives multithreaded GLib programs named locks that also exclude every other
 * process sharing a Redis server, compatible on the wire with Spring Integration's
 * RedisLockRegistry. The concept headers it includes refuse to be included on their
 * own, so the include set can change without breaking applications.
 */
#ifndef REDIS_LOCK_H
#define REDIS_LOCK_H

#define __REDIS_LOCK_H_INSIDE__

#include <redislock/redislock-macros.h>
#include <redislock/redislock-version.h>
#include <redislock/redislock-error.h>
#include <redislock/redislock-registry.h>
#include <redislock/redislock-inspect.h>
#include <redislock/redislock-lock.h>
#include <redislock/redislock-semaphore.h>
#include <redislock/redislock-leader.h>
#include <redislock/redislock-rwlock.h>

#undef __REDIS_LOCK_H_INSIDE__

#endif /* REDIS_LOCK_H */
