package main

import (
	"bufio"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// commandStats reads INFO commandstats: calls per command, and the total.
// ok is false when the server does not say (the in-process server does
// not).
func commandStats(ctx context.Context, rdb *redis.Client) (calls map[string]int64, total int64, ok bool) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, -1, false
	}
	calls = map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		name, stats, found := strings.Cut(strings.TrimPrefix(sc.Text(), "cmdstat_"), ":")
		if !found || !strings.HasPrefix(sc.Text(), "cmdstat_") {
			continue
		}
		for _, kv := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				calls[name] += n
				total += n
			}
		}
	}
	return calls, total, true
}

// commandCalls sums the calls of every command in INFO commandstats; -1
// when the server does not say.
func commandCalls(ctx context.Context, rdb *redis.Client) int64 {
	_, total, _ := commandStats(ctx, rdb)
	return total
}

// commandsBetween is the commands run between two readings, or -1.
func commandsBetween(before, after int64) int64 {
	if before < 0 || after < 0 {
		return -1
	}
	return after - before
}

// commandMix is the commands per request of each command run between two
// readings, busiest first, leaving out INFO (the bench's own readings).
func commandMix(before, after map[string]int64, requests int64) map[string]float64 {
	if before == nil || after == nil || requests <= 0 {
		return nil
	}
	mix := map[string]float64{}
	for name, n := range after {
		if d := n - before[name]; d > 0 && name != "info" {
			mix[name] = float64(d) / float64(requests)
		}
	}
	return mix
}

// fmtMix prints the busiest commands of a mix, e.g. "get 1.02, evalsha 0.03".
func fmtMix(mix map[string]float64, top int) string {
	if len(mix) == 0 {
		return "—"
	}
	names := make([]string, 0, len(mix))
	for n := range mix {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		if mix[names[i]] != mix[names[j]] {
			return mix[names[i]] > mix[names[j]]
		}
		return names[i] < names[j]
	})
	var parts []string
	for i, n := range names {
		if i == top {
			parts = append(parts, "…")
			break
		}
		parts = append(parts, fmt.Sprintf("%s %.2f", n, mix[n]))
	}
	return strings.Join(parts, ", ")
}

// footprint is what a run's keys hold in Redis after the run.
type footprint struct {
	keys        int64   // keys under the run's prefix (deleted by the measurement)
	bytesPerKey float64 // used_memory freed by deleting them, per key; -1 when unknown
}

// redisFootprint counts the keys under prefix (SCAN), then, in one
// MULTI/EXEC so that nothing else runs in between, reads used_memory,
// deletes those keys and reads used_memory again: the difference is the
// memory the keys held, without the connections' buffers that a plain
// before/after reading would mix in. It must run while the run's clients
// are still connected. Deleting the keys also leaves the next strategy a
// Redis as empty as this one found it, without FLUSHDB (REDIS_URL may be
// a Redis with other data). Keys that expire between the SCAN and the
// EXEC are neither counted nor measured.
func redisFootprint(ctx context.Context, admin *redis.Client, prefix string) (footprint, error) {
	var keys []string
	iter := admin.Scan(ctx, 0, "*"+prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return footprint{bytesPerKey: -1}, fmt.Errorf("scan: %w", err)
	}
	if len(keys) == 0 {
		return footprint{bytesPerKey: -1}, nil
	}
	measured := true
	if err := usedMemoryScript.Load(ctx, admin).Err(); err != nil {
		measured = false // a server without scripting: count and delete only
	}
	var before, after *redis.Cmd
	var del *redis.IntCmd
	if _, err := admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
		if measured {
			before = p.EvalSha(ctx, usedMemoryScript.Hash(), nil)
		}
		del = p.Del(ctx, keys...)
		if measured {
			after = p.EvalSha(ctx, usedMemoryScript.Hash(), nil)
		}
		return nil
	}); err != nil && measured {
		measured = false
		if del.Err() != nil {
			return footprint{bytesPerKey: -1}, fmt.Errorf("measure: %w", err)
		}
	} else if err != nil {
		return footprint{bytesPerKey: -1}, fmt.Errorf("delete: %w", err)
	}
	n := del.Val()
	if !measured || n <= 0 {
		return footprint{keys: n, bytesPerKey: -1}, nil
	}
	m1, err1 := before.Int64()
	m2, err2 := after.Int64()
	if err1 != nil || err2 != nil {
		return footprint{keys: n, bytesPerKey: -1}, nil
	}
	return footprint{keys: n, bytesPerKey: float64(m1-m2) / float64(n)}, nil
}

// primeFootprint runs one measurement on keys of its own, so that what
// Redis allocates the first time it runs one (and keeps) is not charged
// to the first strategy's keys: without it the first strategy measured
// showed its keys taking negative memory.
func primeFootprint(ctx context.Context, admin *redis.Client, prefix string) error {
	if _, err := admin.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 64 {
			p.Set(ctx, fmt.Sprintf("%sprime.%d", prefix, i), "x", time.Minute)
		}
		return nil
	}); err != nil {
		return err
	}
	_, err := redisFootprint(ctx, admin, prefix+"prime.")
	return err
}

// usedMemoryScript returns INFO memory's used_memory as an integer: a reply
// of a few bytes. Reading INFO itself inside the measurement would put its
// 1.3 KB reply into the measuring connection's output buffer between the
// two readings, and Redis may grow that buffer by a 16 KB block for it:
// more than a hundred small entries weigh. Lua's own heap is not in
// used_memory.
var usedMemoryScript = redis.NewScript(`return tonumber(string.match(redis.call('INFO', 'memory'), 'used_memory:(%d+)'))`)
