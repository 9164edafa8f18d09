//go:build !race

package robustness

const raceEnabled = false
