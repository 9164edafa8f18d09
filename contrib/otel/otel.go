// Package stampedeotel traces a stampede cache with OpenTelemetry: a span
// per compute (stampede.compute) and per wait for another replica's compute
// (stampede.wait), children of the span in the context of the call that
// started them, with the namespace and outcome as attributes. The cache key
// is recorded only when Options.IncludeKeys says so.
//
//	obs := stampedeotel.New(stampedeotel.Options{})
//	c, _ := cache.New[Report](rdb, cache.Options{Namespace: "reports", Observer: obs})
//
// To export metrics too, combine it with the Prometheus adapter:
// cache.ObserverFunc(func(ctx, e) { prom.Observe(ctx, e); otel.Observe(ctx, e) }).
// An ObserverFunc has no Init method, so cache.New cannot have the
// Prometheus adapter create the namespace's series at 0 through it: name
// the namespaces in its Options.Namespaces (docs/observability.md's
// example, examples/observability, does).
package stampedeotel

import (
	"context"
	"errors"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/stampede-go/stampede/cache"
)

const instrumentation = "github.com/stampede-go/stampede/contrib/otel"

// Options configures [New]. The zero value is valid.
type Options struct {
	// TracerProvider makes the tracer. Default: otel.GetTracerProvider().
	TracerProvider trace.TracerProvider
	// IncludeKeys records the cache key as the stampede.key attribute. Keys
	// may carry user data and make attributes unbounded. Default: false.
	IncludeKeys bool
}

// Observer is a [cache.Observer] that records spans. It is safe for
// concurrent use.
type Observer struct {
	tracer      trace.Tracer
	includeKeys bool
}

var _ cache.Observer = (*Observer)(nil)

// New returns an Observer.
func New(opts Options) *Observer {
	tp := opts.TracerProvider
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Observer{tracer: tp.Tracer(instrumentation), includeKeys: opts.IncludeKeys}
}

// Observe implements [cache.Observer]. Compute and wait events become spans
// that end now and started Duration ago; the others are ignored.
func (o *Observer) Observe(ctx context.Context, e cache.Event) {
	var name string
	switch e.Kind {
	case cache.EventCompute:
		name = "stampede.compute"
	case cache.EventWait:
		name = "stampede.wait"
	default:
		return
	}
	end := time.Now()
	attrs := []attribute.KeyValue{attribute.String("stampede.namespace", e.Namespace)}
	if e.Kind == cache.EventWait {
		attrs = append(attrs, attribute.String("stampede.outcome", e.Outcome.String()))
	}
	if o.includeKeys {
		attrs = append(attrs, attribute.String("stampede.key", e.Key))
	}
	_, span := o.tracer.Start(ctx, name, trace.WithTimestamp(end.Add(-e.Duration)), trace.WithAttributes(attrs...))
	switch {
	case e.Err == nil:
	case errors.Is(e.Err, cache.ErrNotFound):
		span.SetAttributes(attribute.Bool("stampede.not_found", true))
	default:
		span.RecordError(e.Err)
		span.SetStatus(codes.Error, e.Err.Error())
	}
	span.End(trace.WithTimestamp(end))
}
