package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSummarize(t *testing.T) {
	for _, c := range []struct {
		in          []float64
		med, lo, hi float64
	}{
		{[]float64{3, 1, 2}, 2, 1, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
		{[]float64{7}, 7, 7, 7},
	} {
		med, lo, hi := summarize(c.in)
		if med != c.med || lo != c.lo || hi != c.hi {
			t.Errorf("summarize(%v) = %v %v %v, want %v %v %v", c.in, med, lo, hi, c.med, c.lo, c.hi)
		}
	}
}

// Three runs in, one row per figure out, each the median of the runs with
// its min–max; a ratio is taken within each run.
func TestHeadline(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	for i, rps := range []string{"100", "300", "200"} {
		p := filepath.Join(dir, "r"+string(rune('0'+i))+".json")
		js := `{"command":"go run -C bench .","results":[
			{"scenario":"storm","strategy":"stampede-wait","keys":"hot","origin_calls_per_expiry":1},
			{"scenario":"hits","strategy":"stampede-wait","keys":"hot","throughput_rps":` + rps + `},
			{"scenario":"hits","strategy":"go-redis-cache","keys":"hot","throughput_rps":100}]}`
		if err := os.WriteFile(p, []byte(js), 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
	}
	var out bytes.Buffer
	if err := run(paths, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"| origin calls per expiry, stampede-wait, hot key(s) | **1.00** | 1.00–1.00 | 3 |",
		"| hit-path throughput, stampede-wait ÷ go-redis-cache (hits, one hot key) | **2.00×** | 1.00–3.00 | 3 |",
		"| origin calls per expiry, stampede-wait, zipf key(s) | n/a | | 0 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("no line %q in\n%s", want, out.String())
		}
	}
	if err := run(nil, &out); err == nil {
		t.Error("no error without files")
	}
}
