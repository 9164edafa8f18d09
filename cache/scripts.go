package cache

import "github.com/stampede-go/stampede/cache/internal/scripts"

// The Lua scripts of the Redis protocol live in internal/scripts (their
// keys, arguments and replies are documented there); these names are the
// ones the Redis store's steps call them by.
var (
	claimScript   = scripts.Claim
	extendScript  = scripts.Extend
	fillScript    = scripts.Fill
	abandonScript = scripts.Abandon
	setScript     = scripts.Set
	deleteScript  = scripts.Delete
	expireScript  = scripts.Expire
	markScript    = scripts.Mark
	counterScript = scripts.Counter
	clearScript   = scripts.Clear
)
