// Package pgtest is the test helper for tests that need PostgreSQL: a
// private cluster per call, started by [internal/pgserver] on a free
// loopback port and removed when the test ends.
//
// Without the PostgreSQL binaries the test is skipped, except under
// CI=true, where it fails.
package pgtest

import (
	"testing"

	"github.com/stampede-go/stampede/internal/pgserver"
	"github.com/stampede-go/stampede/internal/redistest"
)

// Server starts a PostgreSQL cluster of the test's own, stopped and removed
// when the test ends.
func Server(t testing.TB) *pgserver.Server {
	t.Helper()
	s, err := pgserver.Start(pgserver.Options{})
	if err != nil {
		redistest.Missing(t, "PostgreSQL", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("pgtest: %v", err)
		}
	})
	return s
}
