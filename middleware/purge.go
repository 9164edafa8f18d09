package middleware

// Surrogate keys, the purging half: Purge in code, PurgeHandler over HTTP,
// both the cache's fenced InvalidateTags of the keys' cache tags.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"

	"github.com/stampede-go/stampede/cache"
)

// maxPurgeBody bounds a purge request's JSON body.
const maxPurgeBody = 1 << 20

// Purge invalidates, on every replica, the responses stored in c that were
// tagged with any of keys (by a tag response header or [Tag]), with
// [cache.Cache.InvalidateTags] and its guarantee: once it returns nil, no
// request anywhere in the fleet is answered a response tagged with one of
// keys whose handler run began before the call — neither a stored one nor
// one whose handler was still running during the purge (that run's
// response is not stored, and its request and those sharing it are
// answered by a new run). It takes about the cache's InvalidationWait
// (default 100ms) plus two round trips. Its errors are InvalidateTags' (see
// there: [cache.ErrUnavailable] when Redis failed, and the purge is then
// not guaranteed), or an error matching [cache.ErrInvalidTag] for a key
// that is empty or holds whitespace or a control character. No
// keys is a no-op.
func Purge(ctx context.Context, c *cache.Cache[Response], keys ...string) error {
	if c == nil {
		return errors.New("middleware: Purge: nil cache")
	}
	tags := make([]string, 0, len(keys))
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return err
		}
		tags = append(tags, cacheTag(k))
	}
	if err := c.InvalidateTags(ctx, tags...); err != nil {
		return fmt.Errorf("middleware: purge: %w", err)
	}
	return nil
}

// PurgeHandler returns an http.Handler that purges the responses stored in
// c by surrogate key, with [Purge]. It authorises nothing: mount it behind
// your own authorisation, on a route of its own.
//
// It accepts the methods PURGE and POST (405 otherwise), and takes the keys
// from the request's Surrogate-Key header (whitespace-separated, as Fastly's
// purge API), its Cache-Tag header (comma-separated), and a body of
// Content-Type application/json of the form {"tags": ["a", "b"]} (as
// Cloudflare's purge API), all together. It answers 200 with
// {"purged": [the keys]} once the purge holds fleet-wide; 400 for no keys,
// an empty key or a JSON body that does not parse; 413 for a body over 1
// MiB; 415 for a body of another type; 503 when the purge is not
// guaranteed (Redis unreachable: try again). The purge runs to its end even
// if the client leaves, bounded by 5 seconds.
func PurgeHandler(c *cache.Cache[Response]) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		servePurge(c, w, r)
	})
}

// MethodPurge is the PURGE request method, as Fastly, Varnish and Souin
// name it.
const MethodPurge = "PURGE"

func servePurge(c *cache.Cache[Response], w http.ResponseWriter, r *http.Request) {
	if r.Method != MethodPurge && r.Method != http.MethodPost {
		w.Header().Set("Allow", MethodPurge+", "+http.MethodPost)
		http.Error(w, "purge: method not allowed: use PURGE or POST", http.StatusMethodNotAllowed)
		return
	}
	keys, status, err := purgeKeys(w, r)
	if err != nil {
		http.Error(w, "purge: "+err.Error(), status)
		return
	}
	if c == nil {
		http.Error(w, "purge: no cache", http.StatusServiceUnavailable)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), invalidateTimeout)
	defer cancel()
	if err := Purge(ctx, c, keys...); err != nil {
		status := http.StatusServiceUnavailable
		if errors.Is(err, cache.ErrInvalidTag) {
			status = http.StatusBadRequest
		}
		http.Error(w, err.Error(), status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(struct {
		Purged []string `json:"purged"`
	}{keys})
}

// purgeKeys reads a purge request's keys, or the status and error of a
// request that gives none or gives them wrong.
func purgeKeys(w http.ResponseWriter, r *http.Request) (keys []string, status int, err error) {
	for _, name := range []string{HeaderSurrogateKey, HeaderCacheTag} {
		for _, line := range r.Header.Values(name) {
			keys = splitTags(keys, name, line)
		}
	}
	if r.Body == nil {
		r.Body = http.NoBody
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxPurgeBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return nil, http.StatusRequestEntityTooLarge, fmt.Errorf("body over %d bytes", maxPurgeBody)
	case err != nil:
		return nil, http.StatusBadRequest, fmt.Errorf("reading the body: %w", err)
	}
	if len(strings.TrimSpace(string(body))) > 0 {
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/json" {
			return nil, http.StatusUnsupportedMediaType, errors.New(`a body must be application/json: {"tags": ["a", "b"]}`)
		}
		var req struct {
			Tags []string `json:"tags"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			return nil, http.StatusBadRequest, fmt.Errorf(`body: want {"tags": ["a", "b"]}: %w`, err)
		}
		keys = append(keys, req.Tags...)
	}
	if len(keys) == 0 {
		return nil, http.StatusBadRequest, errors.New(`no surrogate keys: give them in a Surrogate-Key or Cache-Tag header, or a JSON body {"tags": ["a", "b"]}`)
	}
	for _, k := range keys {
		if err := checkKey(k); err != nil {
			return nil, http.StatusBadRequest, err
		}
	}
	return keys, 0, nil
}
