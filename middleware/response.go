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
	// Header holds the response headers, less hop-by-hop ones.
	Header http.Header `msgpack:"h"`
	// Body is the response body.
	Body []byte `msgpack:"b"`
	// VaryOn, when set, makes this entry a marker: the responses for this
	// key vary on these request headers and are stored under keys that
	// include their values.
	VaryOn []string `msgpack:"v,omitempty"`
}

// NewCache returns a cache of responses, for [Cache]. It is [cache.New] for
// the Response type; opts.MaxValueBytes bounds a stored response.
func NewCache(rdb redis.UniversalClient, opts cache.Options) (*cache.Cache[Response], error) {
	return cache.New[Response](rdb, opts)
}
