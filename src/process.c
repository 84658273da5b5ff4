/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* process.c: what the library decides for the whole process: the fork guard and
 * SIGPIPE.
 *
 * A child made by fork() inherits every registry's memory, including its client id,
 * but not its threads; letting it use them would make two processes act as one
 * owner. A pthread_atfork child handler bumps a process-wide generation counter, and
 * every registry remembers the generation it was made in, so the check on each call
 * is one integer comparison and the child handler needs no lock.
 *
 * A write to a server that has gone away raises SIGPIPE unless the writer asks
 * otherwise. The transport's plain sockets do (send() with MSG_NOSIGNAL), but a TLS
 * connection's writes are GnuTLS's own (its default push function, the session made
 * without GNUTLS_NO_SIGNAL): as GLib's GSocket does, the signal is ignored
 * process-wide unless the application installed a handler.
 */
#include "config.h"

#include <pthread.h>
#include <signal.h>

#include "internal.h"

guint rl_fork_generation;

static void
rl_fork_child (void)
{
  __atomic_fetch_add (&rl_fork_generation, 1, __ATOMIC_SEQ_CST);
}

void
rl_fork_guard_init (void)
{
  static gsize once = 0;

  if (g_once_init_enter (&once))
    {
      struct sigaction sa;

      pthread_atfork (NULL, NULL, rl_fork_child);
      /* GnuTLS's writes on a TLS connection may raise SIGPIPE (see above): ignored
       * unless the application installed a handler. */
      if (sigaction (SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL)
        signal (SIGPIPE, SIG_IGN);
      g_once_init_leave (&once, 1);
    }
}
