package cache_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/cache"
)

// Issue 27 (small ones): a Namespace byte outside ASCII is printed as its
// escape ('\xc3'), not as the Latin-1 letter it happens to be ('Ã').
func TestNamespaceErrorPrintsTheByteEscaped(t *testing.T) {
	for ns, want := range map[string]string{
		"ünï":  `byte '\xc3' at 0`,
		"a b":  `byte ' ' at 1`,
		"a\tb": `byte '\t' at 1`,
	} {
		_, err := cache.New[string](nil, cache.Options{Namespace: ns})
		if !errors.Is(err, cache.ErrInvalidOptions) || !strings.Contains(err.Error(), want) {
			t.Errorf("Namespace %q: %v, want %s", ns, err, want)
		}
	}
}
