// Package fencelua holds the one definition of how a fence moves on, as a
// Lua function prepended to every script that moves it: the lease's
// acquisition and the cache's Set and Delete.
package fencelua

import _ "embed"

// Source defines the Lua function next_fence(key, ttl_ms); see next_fence.lua.
//
//go:embed next_fence.lua
var Source string
