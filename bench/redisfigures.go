package main

import (
	"bufio"
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

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
	var before, after *redis.StringCmd
	var del *redis.IntCmd
	if _, err := admin.TxPipelined(ctx, func(p redis.Pipeliner) error {
		before = p.Info(ctx, "memory")
		del = p.Del(ctx, keys...)
		after = p.Info(ctx, "memory")
		return nil
	}); err != nil {
		return footprint{bytesPerKey: -1}, fmt.Errorf("measure: %w", err)
	}
	m1, ok1 := usedMemory(before.Val())
	m2, ok2 := usedMemory(after.Val())
	n := del.Val()
	if !ok1 || !ok2 || n <= 0 {
		return footprint{keys: n, bytesPerKey: -1}, nil
	}
	return footprint{keys: n, bytesPerKey: float64(m1-m2) / float64(n)}, nil
}

// usedMemory reads used_memory from an INFO memory reply.
func usedMemory(info string) (int64, bool) {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
