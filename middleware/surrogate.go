package middleware

// Surrogate keys, the tagging half: a handler tags its response with a
// response header (Surrogate-Key, as Fastly and Souin read it; Cache-Tag,
// as Cloudflare does) or with Tag, the stored entry carries the tags (the
// cache's own cache.SetTags, on the compute that ran the handler), and the
// headers are removed before any response leaves. Purging is in purge.go.
//
// The tags stay in the stored response's header, as the handler sent them,
// and are read from it whenever it is stored: a background refresh whose
// handler answers 304 keeps the stored header, tags included, as RFC 9111
// §4.3.4 keeps every other field. Code tags (Tag) join that header too.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"unicode"

	"github.com/stampede-go/stampede/cache"
)

// ErrNotTagged is returned by [Tag] for a context that is not a cached
// handler run's: a request that bypasses the cache (an unsafe method, one
// carrying Authorization...) stores nothing to tag.
var ErrNotTagged = errors.New("middleware: Tag called outside a cached handler run")

// The tag headers [Options].TagHeaders names by default.
const (
	// HeaderSurrogateKey lists tags separated by whitespace (Fastly,
	// Souin).
	HeaderSurrogateKey = "Surrogate-Key"
	// HeaderCacheTag lists tags separated by commas (Cloudflare).
	HeaderCacheTag = "Cache-Tag"
)

const (
	// maxResponseTags is the cache's limit of tags on one entry: a response
	// with more is answered and not stored (a purge could not reach it).
	maxResponseTags = 32
	// maxCacheTagBytes is the cache's limit on one tag's length.
	maxCacheTagBytes = 128
	// hashedTagPrefix starts the cache tag of a surrogate key that is not
	// a valid cache tag as it is (see cacheTag).
	hashedTagPrefix = "sha256:"
)

// canonicalOnce returns the header names canonical, once each, in their
// order (the first tag header is where Tag's keys go).
func canonicalOnce(names []string) []string {
	out := make([]string, 0, len(names))
	for _, n := range names {
		if n = http.CanonicalHeaderKey(strings.TrimSpace(n)); n != "" && !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// splitTags appends to dst the surrogate keys of one field line of the tag
// header name: comma-separated for Cache-Tag, whitespace-separated for any
// other.
func splitTags(dst []string, name, line string) []string {
	if !strings.EqualFold(name, HeaderCacheTag) {
		return append(dst, strings.Fields(line)...)
	}
	for _, t := range strings.Split(line, ",") {
		if t = strings.TrimSpace(t); t != "" {
			dst = append(dst, t)
		}
	}
	return dst
}

// cacheTag returns the cache tag a surrogate key is stored and purged
// under: the key itself when it is a valid cache tag (see
// [cache.ErrInvalidTag]: ASCII letters, digits and _ - . / :, at most 128
// bytes), and otherwise "sha256:" and the first 128 bits of its SHA-256 in
// hex, so that any key (non-ASCII, longer, other punctuation) can be
// stored and purged. A valid key that starts with "sha256:" is hashed too,
// so that no two keys share a cache tag short of a hash collision.
func cacheTag(key string) string {
	if validCacheTag(key) && !strings.HasPrefix(key, hashedTagPrefix) {
		return key
	}
	sum := sha256.Sum256([]byte(key))
	return hashedTagPrefix + hex.EncodeToString(sum[:16])
}

// validCacheTag reports whether t satisfies the cache's tag rule.
func validCacheTag(t string) bool {
	if t == "" || len(t) > maxCacheTagBytes {
		return false
	}
	for i := 0; i < len(t); i++ {
		switch b := t[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case b == '_', b == '-', b == '.', b == '/', b == ':':
		default:
			return false
		}
	}
	return true
}

// responseTags returns the cache tags of a response header: the surrogate
// keys of every tag header names, mapped by cacheTag, sorted, once each.
// More than the cache's 32 is an error: such a response is not stored.
func responseTags(hdr http.Header, names []string) ([]string, error) {
	var keys []string
	for _, name := range names {
		for _, line := range hdr.Values(name) {
			keys = splitTags(keys, name, line)
		}
	}
	if len(keys) == 0 {
		return nil, nil
	}
	tags := make([]string, 0, len(keys))
	for _, k := range keys {
		tags = append(tags, cacheTag(k))
	}
	slices.Sort(tags)
	tags = slices.Compact(tags)
	if len(tags) > maxResponseTags {
		return nil, fmt.Errorf("%d surrogate keys, the cache's limit is %d", len(tags), maxResponseTags)
	}
	return tags, nil
}

// checkKey validates a surrogate key given to Purge: one a Surrogate-Key
// header could carry.
func checkKey(key string) error {
	if key == "" {
		return fmt.Errorf("%w: empty surrogate key", cache.ErrInvalidTag)
	}
	if i := strings.IndexFunc(key, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }); i >= 0 {
		return fmt.Errorf("%w: surrogate key %q: whitespace or a control character at byte %d", cache.ErrInvalidTag, key, i)
	}
	return nil
}

// checkTagKey validates a surrogate key given to Tag: one any tag header
// could carry, since it joins the first of them.
func checkTagKey(key string) error {
	if i := strings.IndexByte(key, ','); i >= 0 {
		return fmt.Errorf("%w: surrogate key %q: a comma at byte %d", cache.ErrInvalidTag, key, i)
	}
	return checkKey(key)
}

// taggerKey carries a handler run's *tagger in its request's context.
var taggerKey = &struct{ name string }{"middleware tagger"}

// tagger collects the surrogate keys a handler run gives with Tag.
type tagger struct {
	mu   sync.Mutex
	keys []string
}

// Tag tags the response of the cached handler run whose request context
// is ctx (the handler's r.Context()) with surrogate keys, as a tag
// response header would: [Purge] of any of them invalidates the stored
// response on every replica. Keys accumulate over calls and join those of
// the tag headers; up to 32 distinct keys per response (past that the
// response is answered and not stored). A key may hold any character but
// whitespace, commas and control characters; keys that are not valid
// cache tags as they are (non-ASCII, say) are stored hashed (see
// [Options].TagHeaders). It returns an error matching [cache.ErrInvalidTag]
// for such a key, and [ErrNotTagged] outside a cached handler run, where
// nothing is stored (tagging there is harmless to ignore).
func Tag(ctx context.Context, keys ...string) error {
	if ctx == nil {
		return ErrNotTagged
	}
	tg, _ := ctx.Value(taggerKey).(*tagger)
	if tg == nil {
		return ErrNotTagged
	}
	for _, k := range keys {
		if err := checkTagKey(k); err != nil {
			return err
		}
	}
	tg.mu.Lock()
	tg.keys = append(tg.keys, keys...)
	tg.mu.Unlock()
	return nil
}

// withTagger returns a copy of the handler run's request whose context
// carries a fresh tagger for Tag.
func withTagger(req *http.Request) (*http.Request, *tagger) {
	tg := &tagger{}
	return req.WithContext(context.WithValue(req.Context(), taggerKey, tg)), tg
}

// mergeTags returns resp with the keys its run gave with Tag added to its
// first tag header, where responseTags reads them when the response is
// stored and refreshed.
func (o *Options) mergeTags(resp Response, tg *tagger) Response {
	tg.mu.Lock()
	keys := slices.Clone(tg.keys)
	tg.mu.Unlock()
	if len(keys) == 0 || len(o.TagHeaders) == 0 {
		return resp
	}
	name, sep := o.TagHeaders[0], " "
	if strings.EqualFold(name, HeaderCacheTag) {
		sep = ","
	}
	// The header may be a stored response's (a 304 freshened it): never
	// write into a map the cache may hold.
	resp.Header = resp.Header.Clone()
	if resp.Header == nil {
		resp.Header = make(http.Header)
	}
	resp.Header.Add(name, strings.Join(keys, sep))
	return resp
}

// setTags attaches tags to the value the compute of ctx stores. It cannot
// fail: ctx is a compute's and responseTags made the tags valid and few
// enough.
func setTags(ctx context.Context, tags []string) {
	if len(tags) > 0 {
		_ = cache.SetTags(ctx, tags...)
	}
}

// stripTagHeaders returns the writer r is answered through: w, or, unless
// KeepTagHeaders, w removing the tag headers from every response head it
// writes (1xx included), whichever path wrote it (a hit, a miss, a
// streamed run, a bypass). A request asking to switch protocols gets a
// wrapper that is also an http.Hijacker (WebSocket libraries look for it
// by type assertion): its handler may take the connection over, or answer
// it as any other request, tag headers removed.
func (o *Options) stripTagHeaders(w http.ResponseWriter, r *http.Request) http.ResponseWriter {
	if o.KeepTagHeaders || len(o.TagHeaders) == 0 {
		return w
	}
	s := &tagStripper{ResponseWriter: w, names: o.TagHeaders}
	if r.Header.Get("Upgrade") != "" {
		return hijackableStripper{s}
	}
	return s
}

// hijackableStripper is a tagStripper that is an http.Hijacker, for a
// request that asks to switch protocols.
type hijackableStripper struct{ *tagStripper }

// Hijack implements http.Hijacker with the client's writer's Hijack
// (http.ErrNotSupported where it has none, as on HTTP/2).
func (s hijackableStripper) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(s.ResponseWriter).Hijack()
}

// tagStripper is an http.ResponseWriter that removes the tag headers names
// before each head it writes. It implements http.Flusher and Unwrap, so
// http.ResponseController works on it.
type tagStripper struct {
	http.ResponseWriter
	names []string
	wrote bool // the final head is written
}

func (s *tagStripper) strip() {
	hdr := s.ResponseWriter.Header()
	for _, n := range s.names {
		hdr.Del(n)
	}
}

// WriteHeader implements http.ResponseWriter.
func (s *tagStripper) WriteHeader(status int) {
	if !s.wrote {
		s.strip()
		s.wrote = status < 100 || status >= 200 || status == http.StatusSwitchingProtocols
	}
	s.ResponseWriter.WriteHeader(status)
}

// Write implements http.ResponseWriter.
func (s *tagStripper) Write(b []byte) (int, error) {
	if !s.wrote {
		s.strip()
		s.wrote = true
	}
	return s.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (s *tagStripper) Flush() {
	if !s.wrote {
		s.strip()
		s.wrote = true
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Unwrap returns the client's writer, for http.ResponseController.
func (s *tagStripper) Unwrap() http.ResponseWriter { return s.ResponseWriter }
