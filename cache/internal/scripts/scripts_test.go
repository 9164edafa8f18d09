package scripts

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/stampede-go/stampede/internal/redistest"
)

func TestMain(m *testing.M) { redistest.Main(m) }

// all is every script of the package, by its source file.
var all = map[string]*redis.Script{
	"claim.lua": Claim, "extend.lua": Extend, "fill.lua": Fill, "abandon.lua": Abandon,
	"set.lua": Set, "delete.lua": Delete, "expire.lua": Expire,
	"mark.lua": Mark, "counter.lua": Counter, "clear.lua": Clear,
}

// Every script compiles on a real Redis, under the hash EVALSHA will use,
// and every .lua file of the package is a script (advance.lua is the
// prefix of Counter and Clear).
func TestScriptsLoad(t *testing.T) {
	rdb := redistest.Client(t)
	ctx := context.Background()
	for name, s := range all {
		hash, err := s.Load(ctx, rdb).Result()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if hash != s.Hash() {
			t.Errorf("%s: loaded as %s, EVALSHA sends %s", name, hash, s.Hash())
		}
	}
	files, err := filepath.Glob("*.lua")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if _, ok := all[f]; !ok && f != "advance.lua" {
			t.Errorf("%s is no script of the package", f)
		}
	}
	if _, err := os.Stat("advance.lua"); err != nil {
		t.Error(err)
	}
}
