package middleware

// What a handler run's response becomes in the cache (fetch.store): stored
// under the fetch's key, or under a variant key with a marker at the
// fetch's key when it varies on request headers the key lacks, or not
// stored at all (a *notStored, shared with the run's other requests or
// not). The rules it applies are storage.go's.

import (
	"context"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/stampede-go/stampede/cache"
)

// store applies the storage rules to resp: it returns the value to store
// under the fetch's key (resp, or a marker when resp varies on request
// headers the key lacks) and the response to answer the fetch's own
// request with, or a *notStored.
func (f *fetch) store(ctx context.Context, resp Response, prev *Response) (stored, answer Response, err error) {
	h := f.h
	now := time.Now()
	v := h.opts.storage(resp, now)
	if f.regrouped && v.reason == "" {
		// A regrouped run's key is reached by no marker, and no unsafe
		// request's invalidation reaches it: stored there, its response
		// would answer a later regrouped request past a write. It answers
		// the requests that regrouped with it, as a response not stored.
		v = notStorable("a run of requests a joined run did not select", true)
	}
	// Surrogate keys (surrogate.go): the entry carries the response's tags;
	// one with more than the cache allows answers its own request, not stored.
	tags, tagErr := responseTags(resp.Header, h.opts.TagHeaders)
	// A tagged response that is not stored carries no tags into the cache,
	// so no purge fences it: shared, it would answer a request that joined
	// its run after a purge of its keys returned. It answers only its own
	// request; the others run the handler (docs/http.md, "Purging"). A
	// failure (a 5xx: an error, not the URL's content; tagged, say, by a
	// handler that set its keys before it failed) is still shared, so that
	// a failing origin is not called once per waiting request.
	tagged := len(tags) > 0 || tagErr != nil
	// The request headers the response varies on: its Vary, the key's, and
	// the route's own (Authorization, the cookies it varies on).
	names, _ := varyNames(resp.Header)
	names = union(names, h.opts.implicitVary())
	if v.reason != "" {
		ns := &notStored{reason: v.reason, failure: v.failure}
		if v.shareable && (!tagged || v.failure) {
			// It answers only the requests that would select it: those
			// whose values of the headers it varies on are its request's
			// (RFC 9111 §4.1). The other requests that joined the run
			// regroup by variant (fetch.regroup).
			vary := union(f.vary, names)
			ns.shared, ns.vary, ns.selection = &resp, vary, h.opts.Key(f.tmpl.get(), vary)
		}
		return Response{}, resp, ns
	}
	if tagErr != nil {
		return Response{}, resp, &notStored{reason: tagErr.Error()}
	}
	resp = prepareForStorage(resp, now, !h.opts.DeclaredFreshnessOnly)
	resp.StoredAt = now.UnixNano()
	p := h.c.Policy()
	fresh, staleIfError := v.fresh, v.staleIfError
	if fresh < 0 {
		fresh = p.TTL
	}
	if staleIfError < 0 {
		staleIfError = p.StaleIfError
	}
	// Kept past its windows to be revalidated (revalidate.go decides
	// whether it may answer for a failure).
	staleIfError = max(staleIfError, h.opts.keepFor(resp, fresh))
	windows := func(ctx context.Context) {
		setTags(ctx, tags)
		if v.fresh > 0 {
			cache.SetTTL(ctx, v.fresh)
		}
		cache.SetStale(ctx, v.staleFor, staleIfError)
	}
	if len(missing(f.vary, names)) == 0 {
		windows(ctx)
		return resp, resp, nil
	}
	// resp varies on request headers the key lacks: store it under the
	// variant key with their values, and a marker naming them here.
	full := union(f.vary, names)
	generation := f.generation
	if generation == "" && prev != nil && len(prev.VaryOn) > 0 {
		generation = prev.Generation // a refreshed marker keeps its variants
	}
	if generation == "" || len(tags) > 0 {
		// A tagged response's variant is stored by a Fetch of its own,
		// begun after the handler ran: outside this compute's fence
		// against a purge during the run. Under a new generation it is
		// reachable only through this compute's marker, which the fence
		// refuses, so it is never served.
		generation = strconv.FormatUint(rand.Uint64(), 36)
	}
	vkey := variantKey(h.opts.Key(f.tmpl.get(), full), generation)
	if _, err := h.c.Fetch(ctx, vkey, func(ctx context.Context) (Response, error) {
		windows(ctx)
		return resp, nil
	}); err != nil {
		// The variant is not stored (purges of its keys kept coming while
		// it was, the cache's ErrInvalidated; Redis failed): the marker
		// still is, and still answers its request with resp. Its fill and
		// its answer pass this compute's fence, so a purge that overlapped
		// the run up to its answer has the request answered by a new run;
		// a request the marker leads to the variant runs the handler for
		// it. (Returned as not stored, resp would answer its request past
		// the fence: an error is fenced by nothing.)
		h.logFailure(f.tmpl.get(), "response not stored", err)
	}
	marker := Response{VaryOn: full, Generation: generation}
	if f.key != f.urlKey && len(tags) == 0 { // tagged: unfenced (see above), f.key's marker leads there
		// The URL's marker learns the longer list (its entry keeps the
		// cache's TTL); until then this key's marker leads there. Only a
		// marker of this run's generation is replaced: one an unsafe
		// request deleted while the run went on (a new generation, or
		// none) must not be pointed back at the variants it retired.
		// (A read, then a write: a deletion between the two is not
		// seen. The window is theirs, no longer the run's.)
		if cur, found, err := h.c.Get(ctx, f.urlKey); err == nil && found && cur.Generation == f.generation {
			if err := h.c.Set(ctx, f.urlKey, marker); err != nil {
				h.logFailure(f.tmpl.get(), "marker not updated", err)
			}
		}
	}
	// A marker holds no content, only where the variants are: it lives at
	// least the cache's TTL, so that the variants of other header values,
	// stored later, are not orphaned when the first one expires.
	windows(ctx)
	cache.SetTTL(ctx, max(v.fresh, h.c.Policy().TTL))
	return marker, resp, nil
}

// notStored carries a response that must not be stored: a shareable one
// goes to every caller of the shared compute, the others only to the
// request whose run produced it. failure marks a 5xx, for which a stale
// response may answer instead.
type notStored struct {
	reason  string
	shared  *Response // nil when not shareable
	failure bool
	// vary and selection: a shared response answers a request whose key
	// with vary is selection (see selects).
	vary      []string
	selection string
}

func (n *notStored) Error() string { return "middleware: response not stored: " + n.reason }

// selects reports whether a shared response may answer the request kr
// (as admit made it) that joined its run: kr's values of the request
// headers the response varies on are those of the request it was made for.
func (n *notStored) selects(o *Options, kr *http.Request) bool {
	return n.shared != nil && o.Key(kr, n.vary) == n.selection
}

// Is makes non-failures match cache.ErrUncacheable, so that no stale
// response stands in for them.
func (n *notStored) Is(target error) bool { return target == cache.ErrUncacheable && !n.failure }

// missing returns the names not in have (both sorted).
func missing(have, names []string) []string {
	var out []string
	for _, n := range names {
		if _, found := slices.BinarySearch(have, n); !found {
			out = append(out, n)
		}
	}
	return out
}

// union returns the header names of a and b, canonical, sorted, once each.
func union(a, b []string) []string { return canonicalSorted(append(slices.Clone(a), b...)) }

func canonicalSorted(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		out = append(out, http.CanonicalHeaderKey(strings.TrimSpace(n)))
	}
	slices.Sort(out)
	return slices.Compact(out)
}
