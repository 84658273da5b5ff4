/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* leader-helpers.h: what the tests of leader election (leader.c, leader-promise.c)
 * share: a candidate whose callbacks are counted (Candidate, checked in leader.c's
 * on_leader(): one leader at most, func (FALSE) once per grant), and the main context
 * a test runs them in. */
#ifndef REDIS_LOCK_TESTS_LEADER_HELPERS_H
#define REDIS_LOCK_TESTS_LEADER_HELPERS_H

#include "common.h"

typedef struct
{
  RedisLeader *leader;
  guint granted;
  guint ended;
  GCancellable *cancellable; /* of the last leadership, referenced */
  gboolean cancelled_at_end; /* was it cancelled when func (FALSE) ran */
} Candidate;

/* A candidate for @name in @registry, counted in @c, with a pause of 100 ms. */
void candidate_init (Candidate *c, RedisLockRegistry *registry, const char *name);
/* Stops and drops it. */
void candidate_clear (Candidate *c);

/* Iterates the thread-default context for @ms. */
void iterate_for (gint64 ms);

typedef struct
{
  GMainContext *context;
} ContextScope;

/* A new main context, the thread's default until context_leave(), which iterates it a
 * little first. */
void context_enter (ContextScope *scope);
void context_leave (ContextScope *scope);

/* leader-promise.c: its cases, and the candidate process of its stop case
 * (`--act URL NAME TTL`). */
void leader_add_promise_tests (void);
int leader_act_main (const char *url, const char *name, const char *ttl);

#endif /* REDIS_LOCK_TESTS_LEADER_HELPERS_H */
