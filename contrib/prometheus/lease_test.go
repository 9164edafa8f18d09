package stampedeprom_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/contrib/prometheus"
	"github.com/stampede-go/stampede/internal/redistest"
	"github.com/stampede-go/stampede/lease"
)

// Real leases on a real Redis move the lock series; the cache's and the
// leases' observers share one registry.
func TestLeaseSeriesMove(t *testing.T) {
	obs := stampedeprom.NewLeaseObserver(stampedeprom.Options{})
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(obs, stampedeprom.New(stampedeprom.Options{}))
	ctx := context.Background()
	extended := make(chan struct{}, 100)
	locks, err := lease.New(redistest.Client(t), lease.Options{
		Observer: obs, ExtendInterval: 5 * time.Millisecond,
		OnExtend: func(_ *lease.Lease, err error) {
			if err == nil {
				extended <- struct{}{}
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	name := redistest.Prefix(t)
	err = locks.Using(ctx, name, time.Minute, func(ctx context.Context, l *lease.Lease) error {
		<-extended
		<-extended
		if _, err := locks.Acquire(ctx, name, time.Minute); !errors.Is(err, lease.ErrLeaseBusy) {
			t.Errorf("second acquire: %v", err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	l, err := locks.Acquire(ctx, name, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_ = l.Release(ctx)
	if err := l.Release(ctx); !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatal(err)
	}
	rdb := redistest.Client(t)
	err = locks.Using(ctx, name, time.Minute, func(ctx context.Context, l *lease.Lease) error {
		if err := rdb.Set(ctx, l.Key(), "another-owner", time.Minute).Err(); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	if !errors.Is(err, lease.ErrLeaseLost) {
		t.Fatalf("Using with a stolen lease: %v", err)
	}
	// Extensions every 5ms may time out on a busy machine: count the
	// Redis errors from here on.
	errorsBefore := gather(t, reg)[`stampede_lock_redis_errors_total{}`]
	down := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1})
	t.Cleanup(func() { _ = down.Close() })
	broken, err := lease.New(down, lease.Options{Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := broken.Acquire(ctx, name, time.Second); err == nil {
		t.Fatal("acquire on a closed port succeeded")
	}

	got := gather(t, reg)
	for series, want := range map[string]float64{
		`stampede_lock_acquired_total{}`:                     3,
		`stampede_lock_acquire_seconds_count{}`:              3,
		`stampede_lock_busy_total{}`:                         1,
		`stampede_lock_work_seconds_count{}`:                 2,
		`stampede_lock_released_total{}`:                     2,
		`stampede_lock_remaining_at_release_seconds_count{}`: 2,
		`stampede_lock_release_rejected_total{}`:             1, // the double release (Using does not release a lost lease)
		`stampede_lock_lost_total{}`:                         1,
		`stampede_lock_redis_errors_total{}`:                 1,
	} {
		if got[series] != want {
			t.Errorf("%s = %g, want %g", series, got[series], want)
		}
	}
	if n := got[`stampede_lock_redis_errors_total{}`] - errorsBefore; n != 1 {
		t.Errorf("redis errors from the closed port = %g, want 1", n)
	}
	if got[`stampede_lock_extensions_total{result="ok"}`] < 2 {
		t.Errorf("extensions ok = %g, want >= 2", got[`stampede_lock_extensions_total{result="ok"}`])
	}
}
