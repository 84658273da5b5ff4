/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* settings.h: the registry's settings, as the layers below it read them.
 *
 * The registry owns them and its setters write them; lock.c and leases.c only read
 * them, each value atomically and once per decision, so a setter running meanwhile
 * changes the next decision, never half of one.
 */
#ifndef RL_SETTINGS_H
#define RL_SETTINGS_H

#include <glib.h>

typedef struct
{
  gint64 expire_after_ms;       /* atomic: the registry's lease TTL */
  gint64 idle_between_tries_ms; /* atomic: SPIN mode sleep */
  gint wait_mode;               /* atomic: RedisLockWaitMode */
  gint watchdog_enabled;        /* atomic */
  guint max_local_handoffs;     /* atomic */
  gint deadlock_detection;      /* atomic: waits are recorded and checked for cycles */
} RlSettings;

/* Atomic access to 64-bit settings and statistics counters. */
#define RL_ATOMIC_ADD(field, n) __atomic_fetch_add (&(field), (n), __ATOMIC_RELAXED)
#define RL_ATOMIC_SET(field, v) __atomic_store_n (&(field), (v), __ATOMIC_RELAXED)
#define RL_ATOMIC_GET(field) __atomic_load_n (&(field), __ATOMIC_RELAXED)

#endif /* RL_SETTINGS_H */
