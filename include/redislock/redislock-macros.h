/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* redislock-macros.h: the export macro.
 *
 * The libraries are compiled with -fvisibility=hidden, so only functions marked
 * REDIS_LOCK_EXPORT are part of a shared object's ABI; everything in src/ that is
 * not in a public header stays private.
 */
#ifndef REDIS_LOCK_MACROS_H
#define REDIS_LOCK_MACROS_H

#if !defined(__REDIS_LOCK_H_INSIDE__) && !defined(REDIS_LOCK_COMPILATION)
#error "Only <redislock/redislock.h> can be included directly."
#endif

/**
 * REDIS_LOCK_EXPORT:
 * Marks a public function: of libredislock, or, in redislock-test.h, of
 * libredislock-testing (a library exports the marked functions it defines). Public
 * declarations use the REDIS_LOCK_AVAILABLE_IN_* macros of redislock-version.h, which
 * expand to it.
 *
 * Since: 0.1
 */
#if defined(__GNUC__) || defined(__clang__)
#define REDIS_LOCK_EXPORT __attribute__ ((visibility ("default"))) extern
#else
#define REDIS_LOCK_EXPORT extern
#endif

#endif /* REDIS_LOCK_MACROS_H */
