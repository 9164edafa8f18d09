package stampedeotel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/stampede-go/stampede/cache"
	"github.com/stampede-go/stampede/contrib/otel"
	"github.com/stampede-go/stampede/internal/leakcheck"
	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func attr(s sdktrace.ReadOnlySpan, key string) (attribute.Value, bool) {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value, true
		}
	}
	return attribute.Value{}, false
}

func TestSpansForComputeAndWait(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	obs := stampedeotel.New(stampedeotel.Options{TracerProvider: tp})
	ns := redistest.Prefix(t)
	var caches []*cache.Cache[string]
	for range 2 {
		c, err := cache.New[string](redistest.Client(t), cache.Options{Namespace: ns, Observer: obs})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		caches = append(caches, c)
	}
	ctx, parent := tp.Tracer("test").Start(context.Background(), "request")
	started, release := make(chan struct{}), make(chan struct{})
	slow := func(context.Context) (string, error) { close(started); <-release; return "v", nil }
	done := make(chan struct{})
	go func() { defer close(done); _, _ = caches[0].GetOrCompute(ctx, "secret-key", slow) }()
	<-started
	waited := make(chan cache.Result[string])
	go func() {
		r, _ := caches[1].Fetch(context.Background(), "secret-key", slow)
		waited <- r
	}()
	leakcheck.WaitBlocked(t, "cache.(*Cache[...]).wait(", 1, 10*time.Second)
	close(release)
	<-done
	r := <-waited
	parent.End()
	_, _ = caches[0].GetOrCompute(ctx, "broken", func(context.Context) (string, error) { return "", errors.New("origin down") })

	var compute, wait, failed int
	for _, s := range exp.GetSpans().Snapshots() {
		if _, ok := attr(s, "stampede.key"); ok {
			t.Fatalf("span %s records the key without IncludeKeys", s.Name())
		}
		switch s.Name() {
		case "stampede.compute":
			if v, _ := attr(s, "stampede.namespace"); v.AsString() != ns {
				t.Errorf("namespace attribute %q", v.AsString())
			}
			if s.Parent().TraceID() != parent.SpanContext().TraceID() {
				t.Errorf("compute span is not in the caller's trace")
			}
			if s.Status().Code == codes.Error {
				failed++
			} else {
				compute++
				if s.EndTime().Sub(s.StartTime()) <= 0 {
					t.Errorf("compute span has no duration")
				}
			}
		case "stampede.wait":
			wait++
			if v, _ := attr(s, "stampede.outcome"); v.AsString() != r.Outcome.String() {
				t.Errorf("wait outcome %q, result %v", v.AsString(), r.Outcome)
			}
		}
	}
	if compute != 1 || failed != 1 {
		t.Fatalf("compute spans %d, failed %d", compute, failed)
	}
	if r.Outcome != cache.Waited || wait != 1 {
		t.Fatalf("wait spans %d for a waited result", wait)
	}
}

func TestIncludeKeys(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	obs := stampedeotel.New(stampedeotel.Options{TracerProvider: tp, IncludeKeys: true})
	obs.Observe(context.Background(), cache.Event{Kind: cache.EventCompute, Namespace: "n", Key: "k1", Duration: time.Millisecond})
	obs.Observe(context.Background(), cache.Event{Kind: cache.EventOutcome, Namespace: "n", Key: "k1"}) // not a span
	spans := exp.GetSpans().Snapshots()
	if len(spans) != 1 {
		t.Fatalf("%d spans", len(spans))
	}
	if v, ok := attr(spans[0], "stampede.key"); !ok || v.AsString() != "k1" {
		t.Fatalf("key attribute %v %v", v, ok)
	}
}
