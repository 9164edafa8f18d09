// Package fencelua holds the one definition of how a fence moves on, as Lua
// functions prepended to every script that moves it: the lease's
// acquisition, the cache's Set and Delete, and a Redlock quorum's
// acquisition, which reads a floor on each server before it writes the
// fence back.
package fencelua

import _ "embed"

// Source defines the Lua function next_fence(key, ttl_ms); see next_fence.lua.
//
//go:embed next_fence.lua
var Source string

// FloorSource defines the Lua function fence_floor(key); see fence_floor.lua.
//
//go:embed fence_floor.lua
var FloorSource string
