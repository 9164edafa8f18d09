package middleware

import (
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/cache"
)

// Response is a stored response: what the middleware keeps in its cache.
type Response struct {
	// Status is the HTTP status code.
	Status int `msgpack:"s"`
	// Header holds the response headers, less hop-by-hop ones; Age holds
	// the response's age when it was stored.
	Header http.Header `msgpack:"h"`
	// Body is the response body.
	Body []byte `msgpack:"b"`
	// VaryOn, when set, makes this entry a marker: the responses for this
	// key vary on these request headers and are stored under keys that
	// include their values and Generation.
	VaryOn []string `msgpack:"v,omitempty"`
	// StoredAt is when the response was stored (Unix nanoseconds): its
	// age and windows are counted from it. 0 for a marker.
	StoredAt int64 `msgpack:"t,omitempty"`
	// Generation names the set of variants a marker points to; deleting
	// the marker (an unsafe request's invalidation) retires them all.
	Generation string `msgpack:"g,omitempty"`
}

// Weight implements [cache.Weigher]: a Response weighs its body, its
// header names and values, VaryOn and Generation, in bytes, so that
// Options.MaxLocalBytes bounds what a process-local cache of responses
// (NewCache with a nil client) holds.
func (r Response) Weight() int {
	n := len(r.Body) + len(r.Generation)
	for k, vs := range r.Header {
		n += len(k)
		for _, v := range vs {
			n += len(v)
		}
	}
	for _, v := range r.VaryOn {
		n += len(v)
	}
	return n
}

var _ cache.Weigher = Response{}

// headerAllowance is what NewCache adds to the default MaxBodyBytes for a
// stored response's status, headers and encoding.
const headerAllowance = 64 << 10

// NewCache returns a cache of responses, for [Cache]. It is [cache.New] for
// the Response type, except that a zero opts.MaxValueBytes means room for a
// body of the default MaxBodyBytes (1 MiB) plus 64 KiB of headers. A route
// with a larger Options.MaxBodyBytes needs a MaxValueBytes that much larger;
// a response that does not fit is served to its own request, not stored,
// and logged (Options.Logger). With a nil rdb (process-local responses),
// opts.MaxLocalBytes bounds what the responses held weigh (see
// [Response.Weight]; default 256 MiB).
func NewCache(rdb redis.UniversalClient, opts cache.Options) (*cache.Cache[Response], error) {
	if opts.MaxValueBytes == 0 {
		opts.MaxValueBytes = defaultMaxBodyBytes + headerAllowance
	}
	return cache.New[Response](rdb, opts)
}
