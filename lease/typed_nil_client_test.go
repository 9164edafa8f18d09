package lease_test

import (
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/lease"
)

// Issue 25, case 6. A typed nil client, (*redis.Client)(nil), is a non-nil
// redis.Scripter: it was accepted, and the first Acquire panicked. New and
// NewQuorum reject it with ErrInvalidOptions, saying which client.
func TestTypedNilClientIsAnErrorNotAPanic(t *testing.T) {
	var nilClient *redis.Client
	var nilCluster *redis.ClusterClient
	if _, err := lease.New(nilClient, lease.Options{}); !errors.Is(err, lease.ErrInvalidOptions) {
		t.Errorf("New((*redis.Client)(nil)): %v, want ErrInvalidOptions", err)
	}
	if _, err := lease.New(nilCluster, lease.Options{}); !errors.Is(err, lease.ErrInvalidOptions) {
		t.Errorf("New((*redis.ClusterClient)(nil)): %v, want ErrInvalidOptions", err)
	}
	live := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = live.Close() })
	_, err := lease.NewQuorum([]redis.Scripter{live, nilClient, live}, lease.QuorumOptions{})
	if !errors.Is(err, lease.ErrInvalidOptions) {
		t.Fatalf("NewQuorum with a typed nil client: %v, want ErrInvalidOptions", err)
	}
	t.Log(err)
}
