package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/cache"
)

// The tag headers' grammars: Surrogate-Key splits on whitespace, Cache-Tag
// on commas; every key becomes a valid cache tag, itself or hashed; a
// response's tags are sorted and once each, at most the cache's 32.
func TestTagHeadersParseBySurrogateKeyAndCacheTagGrammar(t *testing.T) {
	defaults := []string{HeaderSurrogateKey, HeaderCacheTag}
	long := strings.Repeat("k", 129)
	var many, tooMany []string
	for i := range 40 {
		if i < 32 {
			many = append(many, fmt.Sprintf("t%02d", i))
		}
		tooMany = append(tooMany, fmt.Sprintf("t%02d", i))
	}
	for _, tc := range []struct {
		name    string
		header  http.Header
		names   []string
		want    []string
		wantErr bool
	}{
		{name: "none", header: http.Header{}},
		{name: "empty Surrogate-Key", header: http.Header{"Surrogate-Key": {""}}},
		{name: "blank Surrogate-Key", header: http.Header{"Surrogate-Key": {" \t "}}},
		{name: "empty Cache-Tag", header: http.Header{"Cache-Tag": {" , ,"}}},
		{name: "Surrogate-Key spaces and tabs", header: http.Header{"Surrogate-Key": {" b  a\tc "}}, want: []string{"a", "b", "c"}},
		{name: "Cache-Tag commas", header: http.Header{"Cache-Tag": {"b, a ,c"}}, want: []string{"a", "b", "c"}},
		{name: "a comma is part of a Surrogate-Key", header: http.Header{"Surrogate-Key": {"a,b"}}, want: []string{cacheTag("a,b")}},
		{name: "a space is part of a Cache-Tag", header: http.Header{"Cache-Tag": {"a b"}}, want: []string{cacheTag("a b")}},
		{name: "field lines add up", header: http.Header{"Surrogate-Key": {"a", "b"}, "Cache-Tag": {"c", "d,e"}}, want: []string{"a", "b", "c", "d", "e"}},
		{name: "duplicates once", header: http.Header{"Surrogate-Key": {"a a b", "a"}, "Cache-Tag": {"b,a"}}, want: []string{"a", "b"}},
		{name: "keys are case-sensitive", header: http.Header{"Surrogate-Key": {"A a"}}, want: []string{"A", "a"}},
		{name: "cache-tag alphabet kept", header: http.Header{"Surrogate-Key": {"user:42 /reports/42 a_b-c.d"}}, want: []string{"/reports/42", "a_b-c.d", "user:42"}},
		{name: "non-ASCII hashed", header: http.Header{"Surrogate-Key": {"café ünïcode"}}, want: sorted(cacheTag("café"), cacheTag("ünïcode"))},
		{name: "over 128 bytes hashed", header: http.Header{"Surrogate-Key": {long}}, want: []string{cacheTag(long)}},
		{name: "hash prefix hashed", header: http.Header{"Surrogate-Key": {"sha256:00"}}, want: []string{cacheTag("sha256:00")}},
		{name: "32 keys", header: http.Header{"Surrogate-Key": {strings.Join(many, " ")}}, want: many},
		{name: "33 and more keys", header: http.Header{"Surrogate-Key": {strings.Join(tooMany, " ")}}, wantErr: true},
		{name: "40 keys, 32 distinct", header: http.Header{"Surrogate-Key": {strings.Join(append(slices.Clone(many), many[:8]...), " ")}}, want: many},
		{name: "other headers ignored", header: http.Header{"X-Tags": {"a"}}},
		{name: "configured header", header: http.Header{"X-Tags": {"a b"}, "Surrogate-Key": {"c"}}, names: []string{"X-Tags"}, want: []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names := tc.names
			if names == nil {
				names = defaults
			}
			got, err := responseTags(tc.header, names)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("got %q, want an error", got)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, want %q", got, tc.want)
			}
			for _, tag := range got {
				if !validCacheTag(tag) {
					t.Errorf("%q is not a valid cache tag", tag)
				}
			}
		})
	}
}

func sorted(s ...string) []string { slices.Sort(s); return s }

// A hashed key's tag is the cache's own: InvalidateTags takes it.
func TestHashedSurrogateKeysAreValidCacheTags(t *testing.T) {
	c, err := NewCache(nil, cache.Options{Namespace: "hashed"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for _, k := range []string{"café", "a,b", "sha256:x", strings.Repeat("é", 100), "日本語"} {
		tag := cacheTag(k)
		if tag == k || !strings.HasPrefix(tag, hashedTagPrefix) {
			t.Errorf("%q: tag %q, want it hashed", k, tag)
		}
		if err := c.InvalidateTags(t.Context(), tag); err != nil {
			t.Errorf("%q: InvalidateTags(%q): %v", k, tag, err)
		}
	}
	if cacheTag("café") == cacheTag("cafe") {
		t.Error("two keys share a tag")
	}
}

// Keys given in code follow the headers' grammar; a bad one is a clear
// error, never a panic.
func TestCodeKeysRejectWhatNoHeaderCarries(t *testing.T) {
	for _, k := range []string{"", "a b", "a\tb", "a\nb", "a\x00b"} {
		if err := checkKey(k); !errors.Is(err, cache.ErrInvalidTag) {
			t.Errorf("checkKey(%q) = %v, want ErrInvalidTag", k, err)
		}
	}
	if err := checkKey("a,b"); err != nil {
		t.Errorf("a Surrogate-Key may hold a comma: %v", err)
	}
	if err := checkTagKey("a,b"); !errors.Is(err, cache.ErrInvalidTag) {
		t.Errorf("checkTagKey(a,b) = %v, want ErrInvalidTag", err)
	}
	for _, k := range []string{"a", "café", "user:42", "sha256:x"} {
		if err := checkTagKey(k); err != nil {
			t.Errorf("checkTagKey(%q): %v", k, err)
		}
	}
}

// Any tag header values parse without a panic into at most 32 valid cache
// tags, sorted and once each, or an error for more.
func FuzzResponseTags(f *testing.F) {
	f.Add("a b c", "x,y")
	f.Add("café sha256:00", " , ")
	f.Add(strings.Repeat("k ", 40), "")
	f.Fuzz(func(t *testing.T, surrogateKey, cacheTagValue string) {
		hdr := http.Header{"Surrogate-Key": {surrogateKey}, "Cache-Tag": {cacheTagValue}}
		tags, err := responseTags(hdr, []string{HeaderSurrogateKey, HeaderCacheTag})
		if err != nil {
			return
		}
		if len(tags) > maxResponseTags || !slices.IsSorted(tags) || len(slices.Compact(slices.Clone(tags))) != len(tags) {
			t.Fatalf("tags %q", tags)
		}
		for _, tag := range tags {
			if !validCacheTag(tag) {
				t.Fatalf("%q is not a valid cache tag", tag)
			}
		}
	})
}
