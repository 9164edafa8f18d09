// Package middleware caches responses of expensive net/http routes in a
// [cache.Cache], so that when an entry expires only the first request in the
// whole fleet runs the handler and the rest are served its result (or the
// stale one). Its middleware is a plain func(http.Handler) http.Handler, so
// it works with net/http and with chi (r.Use, r.With).
//
//	responses, _ := middleware.NewCache(rdb, cache.Options{Namespace: "http", TTL: time.Minute})
//	r := chi.NewRouter()
//	r.With(middleware.Cache(responses)).Get("/reports/{id}", reportHandler)
//
// What it does, in short:
//   - GET and HEAD are cached (HEAD is answered from the GET entry); other
//     methods, and requests carrying Authorization (unless configured), pass
//     through untouched.
//   - The key is the method class, host, path and query with its parameters
//     sorted, plus the request headers named by configuration and by the
//     response's Vary.
//   - The response decides: Cache-Control no-store, private or no-cache, a
//     Set-Cookie, or Vary: * keep it out of the cache and out of every other
//     client's hands; s-maxage / max-age set the TTL; stale-while-revalidate
//     and stale-if-error set the stale windows (RFC 5861).
//   - Only configured statuses are stored (200, 203, 301, 404, 410 by
//     default); a 5xx never is, and with stale-if-error a 5xx is answered
//     with the stale response.
//   - A strong ETag is added when the handler set none, and a matching
//     If-None-Match gets 304.
//   - Every response carries Age and a status header (X-Cache: HIT, MISS,
//     STALE, SHARED, WAITED, DEGRADED or BYPASS).
//   - A body over MaxBodyBytes is streamed through to its client and not
//     stored; a handler's panic or a client's disconnect never stores
//     anything wrong.
package middleware
