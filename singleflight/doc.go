// Package singleflight coalesces concurrent calls for the same key into one,
// like golang.org/x/sync/singleflight, with three differences that matter
// for a cache in front of an expensive origin:
//
//   - it is typed: [Group] returns a V, not an interface value;
//   - it is context-aware: each caller's context bounds only that caller's
//     wait, and the shared call runs under a context detached from every
//     caller's cancellation (keeping the first caller's values), bounded by
//     [Group.Timeout];
//   - a panic or runtime.Goexit in the function becomes an error for every
//     caller ([*PanicError], [ErrGoexit]); no goroutine re-panics, no caller
//     stays stuck, and the key can be called again at once.
package singleflight
