// Package middleware caches responses of expensive net/http routes in a
// [cache.Cache], so that when an entry expires only the first request in the
// whole fleet runs the handler and the rest are served its result (or the
// stale one). Its middleware is a plain func(http.Handler) http.Handler, so
// it works with net/http and with chi (r.Use, r.With; add chi's GetHead to
// the router for HEAD on GET routes).
//
//	responses, _ := middleware.NewCache(rdb, cache.Options{Namespace: "http", TTL: time.Minute})
//	r := chi.NewRouter()
//	r.Use(chimiddleware.GetHead)
//	r.With(middleware.Cache(responses)).Get("/reports/{id}", reportHandler)
//
// What it does, in short:
//   - GET and HEAD are cached (HEAD is answered from the GET entry). Other
//     methods, requests carrying Authorization (unless CacheAuthorized,
//     which keys each credential apart) and requests carrying a cookie the
//     route does not name (Options.IgnoreCookies, VaryCookies) pass
//     through; an unsafe method that succeeds invalidates the entries of its
//     URL, Location and Content-Location fleet-wide (RFC 9111 §4.4).
//   - The key is the method class, host, path (decoded and as sent), the
//     query as sent and the forwarding headers when present, plus the
//     request headers named by configuration and by the response's Vary,
//     hashed: it holds what the handler reads, so that no request poisons
//     another's entry (docs/http.md, "Security").
//   - The response decides, by the rules of RFC 9111 for a shared cache
//     (storage.go): no-store, private, no-cache, Set-Cookie or Vary: * keep
//     it out of the cache and out of every other client's hands; s-maxage,
//     max-age or Expires, less the response's age, set the TTL;
//     must-revalidate and proxy-revalidate forbid stale answers;
//     stale-while-revalidate and stale-if-error set the stale windows.
//   - Any status with a declared lifetime is stored (RFC 9111 §3); without
//     one, only the heuristically cacheable statuses, and never a 5xx, which
//     a stale response answers instead inside its stale-if-error window.
//     CDN-Cache-Control (RFC 9213; Options.TargetedHeader) replaces
//     Cache-Control when it parses.
//   - The shared handler run is a plain GET; each request's 304, 206 or 412
//     is derived from the full response. A strong ETag is added when the
//     handler set none. While the cache keeps a response with the
//     handler's own validators (its stale windows; past them with
//     DeclaredFreshnessOnly or must-revalidate), the run that replaces it
//     (on the request path, shared fleet-wide like any run, or a background
//     refresh) sends them: a 304 answers with the stored body and the
//     304's headers.
//   - Every response carries Age and a status header (X-Cache: HIT, MISS,
//     STALE, SHARED, WAITED, DEGRADED or BYPASS).
//   - The handler runs on a copy of the request, routing state included
//     (chi's pooled route context is cloned), detached from the client: a
//     client's disconnect or a background refresh never makes it read
//     another request's route parameters.
//   - A response that is flushed, or outgrows MaxBodyBytes, streams to its
//     own client and is not stored; 1xx responses go to the live client
//     only; a handler's panic never stores anything.
//   - A handler tags its response with surrogate keys (a Surrogate-Key or
//     Cache-Tag response header, removed before the client sees it, or
//     [Tag]); [Purge] and [PurgeHandler] invalidate every response tagged
//     with a key, fleet-wide, with the cache's fenced InvalidateTags: not
//     even a handler run under way during the purge is stored or served.
package middleware
