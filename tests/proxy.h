/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* proxy.h: a fault-injecting TCP proxy between a registry and a test's redis-server.
 *
 * Killing or freezing the whole server (redis_lock_test_server_stop(), _pause()) breaks
 * every connection at once. Some faults are narrower: one request that reaches the
 * server late, a reply that never comes back, replies that arrive after the command
 * timeout, connections reset under a registry that keeps its server. A TestProxy sits
 * in the middle to make those: it listens on 127.0.0.1 (loopback only, on a port the
 * kernel picks) and forwards every connection it accepts to the server's Unix socket
 * (or to a port on 127.0.0.1), byte for byte, until a test tells it to hold, drop,
 * delay or cut. A registry made with test_proxy_get_url() reaches the server only
 * through it; the test's own raw connection (fixture->redis) still goes straight to
 * the server, so the test can look at the real state while the registry cannot.
 *
 * The proxy works on chunks, what one read() returns, and does not parse RESP: a
 * request matched by its bytes is held with whatever else the client had sent in the
 * same chunk. hiredis writes each command (or pipeline) in one write, and the proxy
 * reads up to 64 KiB at a time, so for the small commands of these tests a chunk is
 * one command or one pipeline.
 *
 * One thread per proxy polls every socket (and a wake-up pipe); the control functions
 * below may be called from any thread. Those that change connections (release, kill)
 * return once the proxy thread has done it. Its state is guarded by a pthread mutex
 * and condition variable (TestSync), which ThreadSanitizer can follow. All its file
 * descriptors are close-on-exec, so they never show up in a child that execs.
 */
#ifndef REDIS_LOCK_TESTS_PROXY_H
#define REDIS_LOCK_TESTS_PROXY_H

#include <glib.h>

G_BEGIN_DECLS

typedef struct _TestProxy TestProxy;

/* Starts a proxy forwarding to the Unix socket @socket_path (for a test server:
 * redis_lock_test_server_get_socket_path()). Asserts that it could listen. Every
 * accepted connection connects to @socket_path at once; when that fails, the
 * accepted connection is closed (the client sees the server as gone). */
TestProxy *test_proxy_new_unix (const char *socket_path);

/* Starts a proxy forwarding to 127.0.0.1:@port, as test_proxy_new_unix() does. */
TestProxy *test_proxy_new_tcp (guint16 port);

/* "redis://127.0.0.1:PORT", the URL a registry reaches the target through; owned by
 * @proxy. It carries no password: for a server with requirepass, build a URL with
 * test_proxy_get_port() instead. */
const char *test_proxy_get_url (TestProxy *proxy);

/* The port the proxy listens on (on 127.0.0.1). */
guint16 test_proxy_get_port (TestProxy *proxy);

/* From now on, the first client->server chunk, on any connection, that contains the
 * bytes of @match is not forwarded, and neither is anything the client sends after it
 * on that connection, until test_proxy_release_held(). Other connections, and the
 * replies on this one, keep flowing. Only one chunk is caught per call: a second call
 * re-arms the proxy with a new @match (and forgets an armed one that caught nothing).
 * @match must not be empty. A client that gives up (its command timeout) and closes
 * the connection does not take the held bytes with it: as a real server would still
 * read them from its socket buffer, they reach the server at test_proxy_release_held(),
 * and then the proxy closes that server connection. */
void test_proxy_hold_requests (TestProxy *proxy, const char *match);

/* From now on, the first client->server chunk that contains the bytes of @match is
 * forwarded, but everything the server answers on that connection is kept back until
 * test_proxy_release_held(): the request takes effect, its reply comes late. Other
 * connections keep flowing. One connection per call, as test_proxy_hold_requests(). */
void test_proxy_hold_replies (TestProxy *proxy, const char *match);

/* Waits until a chunk has been held since the last test_proxy_hold_requests(): TRUE
 * when one has (at once when it already had), FALSE after @timeout_ms. */
gboolean test_proxy_wait_held (TestProxy *proxy, gint64 timeout_ms);

/* The client bytes held right now, over all connections: the matching chunk and what
 * its client sent after it. A test waits for this to reach what it sent to know that
 * the proxy has read (and kept back) all of it. */
gsize test_proxy_held_bytes (TestProxy *proxy);

/* Forwards every held byte to the server, in the order the client sent them, and lets
 * the held connection flow again. Disarms a hold that has caught nothing yet. Returns
 * once the bytes are handed to the server socket (or queued for it). */
void test_proxy_release_held (TestProxy *proxy);

/* The next @n server->client chunks, on any connection, are read and thrown away
 * (counted in test_proxy_replies_dropped()). Adds to the chunks still to drop. */
void test_proxy_drop_replies (TestProxy *proxy, guint n);

/* From now on, each server->client chunk is forwarded @ms after the proxy read it
 * (0: at once, the default). Chunks of one connection keep their order. */
void test_proxy_delay_replies (TestProxy *proxy, gint64 ms);

/* Closes every proxied connection, both sides (the client sees the connection reset
 * or closed, the server a client that went away); held and delayed bytes are thrown
 * away. The proxy keeps listening: the next connection attempt succeeds. Returns once
 * they are closed. */
void test_proxy_kill_connections (TestProxy *proxy);

/* Connections accepted since the proxy started (including those whose connection to
 * the target failed). */
guint test_proxy_connections_accepted (TestProxy *proxy);

/* Proxied connections currently open; one its client closed counts until the proxy
 * thread has seen the close. */
guint test_proxy_connections_open (TestProxy *proxy);

/* Server->client chunks thrown away by test_proxy_drop_replies() so far. */
guint test_proxy_replies_dropped (TestProxy *proxy);

/* Stops the proxy thread, closes every connection and the listening socket, and frees
 * @proxy. NULL is ignored. */
void test_proxy_free (TestProxy *proxy);

G_DEFINE_AUTOPTR_CLEANUP_FUNC (TestProxy, test_proxy_free)

G_END_DECLS

#endif /* REDIS_LOCK_TESTS_PROXY_H */
