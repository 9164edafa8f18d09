// Package dialwatch tells the owner of a go-redis client of each of its
// dials that failed for a reason known at once: a refused connection, an
// unknown host, a TLS handshake that failed. go-redis hides such a failure
// from the command that dialled (it dials again and retries with backoff),
// so a step waiting for the command would wait out its budget and report
// a silent server it was not. A dial timeout (a black hole: found by the
// budget) and a dial whose own context ended are not reported.
//
// The cache's Redis steps (cache/internal/redisstep) and the lease's
// (lease) both use it.
package dialwatch

import (
	"context"
	"errors"
	"net"

	"github.com/redis/go-redis/v9"
)

// Hook is a redis.Hook that calls Failed with the error of each failed
// dial of the client it is added to (for a Cluster or a Ring: of each
// node's client it is added to; go-redis never calls a dial hook added to
// the ClusterClient or Ring itself). Commands and pipelines pass
// untouched.
type Hook struct {
	Failed func(error)
}

var _ redis.Hook = Hook{}

// DialHook implements redis.Hook.
func (h Hook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && ctx.Err() == nil {
			var ne net.Error
			if !(errors.As(err, &ne) && ne.Timeout()) {
				h.Failed(err)
			}
		}
		return conn, err
	}
}

// ProcessHook implements redis.Hook: commands pass untouched.
func (Hook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

// ProcessPipelineHook implements redis.Hook: pipelines pass untouched.
func (Hook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
