package main

import (
	"bytes"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

func TestQuickstartStopsTheStampede(t *testing.T) {
	var out bytes.Buffer
	getenv := redistest.Getenv(t)
	if err := run([]string{"-replicas", "3", "-callers", "40", "-latency", "20ms"}, &out, getenv); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	text := out.String()
	calls := func(strategy string) int {
		re := regexp.MustCompile(regexp.QuoteMeta(strategy) + `[^\n]*?\s(\d+)\s+\d+(\.\d+)?[mµ]?s`)
		m := re.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("no figure for %s in\n%s", strategy, text)
		}
		n, _ := strconv.Atoi(m[1])
		return n
	}
	// Cache-aside lets every caller that read before the first SET compute:
	// at least one per replica, usually nearly all 120.
	if n := calls("cache-aside"); n < 3 || n > 120 {
		t.Errorf("cache-aside: %d origin calls", n)
	}
	if n := calls("in-process singleflight only"); n != 3 {
		t.Errorf("singleflight only: %d origin calls, want one per replica (3)", n)
	}
	if n := calls("stampede"); n != 1 {
		t.Errorf("stampede: %d origin calls, want 1", n)
	}
	if !strings.Contains(text, "REDIS_URL") {
		t.Errorf("first line does not say which Redis:\n%s", text)
	}
}

func TestQuickstartRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{{"-replicas", "0"}, {"-callers", "-1"}, {"-latency", "-1s"}, {"-replicas", "1000", "-callers", "1000"}, {"-nope"}} {
		var out bytes.Buffer
		if err := run(args, &out, func(string) string { return "" }); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
