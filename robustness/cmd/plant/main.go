// Command plant measures the robustness suite's mutation score: it plants
// each bug of package plant, one at a time, in a copy of the repository,
// runs the short profile against it, and prints which property caught it
// in how many runs, with the seeds.
//
//	go run -C robustness ./cmd/plant                  # every plant, 2 runs each (see docs/testing.md for its time)
//	go run -C robustness ./cmd/plant -runs 1 -bugs http-credential-unkeyed
//
// The copy lives in a temporary directory and is removed afterwards; the
// repository itself is never edited.
package main

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/stampede-go/stampede/robustness/plant"
)

func main() {
	runs := flag.Int("runs", 2, "short-profile runs per planted bug")
	only := flag.String("bugs", "", "comma-separated plant names (default: all)")
	flag.Parse()
	root, err := repoRoot()
	if err != nil {
		fail(err)
	}
	bugs := plant.Bugs
	if *only != "" {
		bugs = nil
		for _, name := range strings.Split(*only, ",") {
			b, ok := plant.Named(name)
			if !ok {
				fail(fmt.Errorf("no plant named %q", name))
			}
			bugs = append(bugs, b)
		}
	}
	fmt.Printf("%-26s %5s %7s  %-28s %s\n", "planted bug", "runs", "caught", "by", "seeds (scenario) of the runs that caught it")
	for _, b := range bugs {
		caught, by, seeds, err := measure(root, b, *runs)
		if err != nil {
			fail(err)
		}
		fmt.Printf("%-26s %5d %7d  %-28s %s\n", b.Name, *runs, caught, strings.Join(by, ","), strings.Join(seeds, " "))
	}
}

// measure plants b in a fresh copy of root and runs the short profile runs
// times: the scenarios b names (plant.Bug.Scenarios), or all, stopping at
// the first that fails.
func measure(root string, b plant.Bug, runs int) (caught int, by, seeds []string, err error) {
	dir, err := os.MkdirTemp("", "stampede-plant-")
	if err != nil {
		return 0, nil, nil, err
	}
	defer os.RemoveAll(dir)
	if err := copyTree(root, dir); err != nil {
		return 0, nil, nil, err
	}
	if err := b.Apply(dir); err != nil {
		return 0, nil, nil, err
	}
	for range runs {
		test := b.Test
		if test == "" {
			test = "TestRobustness"
		}
		run := "^" + test + "$"
		if len(b.Scenarios) > 0 {
			run += "/^(" + strings.Join(b.Scenarios, "|") + ")$"
		}
		cmd := exec.Command("go", "test", "-count=1", "-failfast", "-run", run, "-timeout", "10m", ".")
		cmd.Dir = filepath.Join(dir, "robustness")
		// Paths trimmed, every copy's unchanged packages (and the replica
		// the test builds) come from the build cache.
		cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -trimpath"))
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		runErr := cmd.Run()
		props, runSeeds := violations(out.Bytes())
		fmt.Fprintf(os.Stderr, "%s: run in %s: %d properties\n", b.Name, time.Since(start).Round(time.Second), len(props))
		if runErr == nil {
			continue
		}
		if len(props) == 0 {
			return 0, nil, nil, fmt.Errorf("%s: the short profile failed without a violation (the plant breaks the build or a test?):\n%s", b.Name, tail(out.String(), 40))
		}
		caught++
		for _, p := range props {
			if !slices.Contains(by, p) {
				by = append(by, p)
			}
		}
		seeds = append(seeds, runSeeds...)
	}
	return caught, by, seeds, nil
}

var (
	violationLine = regexp.MustCompile(`_test\.go:\d+: ([a-z][a-z -]*[a-z]): `)
	seedLine      = regexp.MustCompile(`--- FAIL: Test(?:Robustness|LockSet)/(\S+)|seed (\d+): .*; [1-9]\d* violations`)
)

// violations reads the properties broken and the seeds of failed scenarios
// from a short profile's output.
func violations(out []byte) (props, seeds []string) {
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	scenario := ""
	for sc.Scan() {
		line := sc.Text()
		if m := seedLine.FindStringSubmatch(line); m != nil {
			if m[1] != "" {
				scenario = m[1]
			} else {
				seeds = append(seeds, m[2]+" ("+scenario+")")
			}
		}
		if m := violationLine.FindStringSubmatch(line); m != nil && m[1] != "replay" && m[1] != "seed" {
			if !slices.Contains(props, m[1]) {
				props = append(props, m[1])
			}
		}
	}
	return props, seeds
}

// repoRoot is the repository this command runs in.
func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("not in a git checkout: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// copyTree copies the files git knows of under root (tracked, and
// untracked but not ignored) into dir, as they are in the working tree.
func copyTree(root, dir string) error {
	out, err := exec.Command("git", "-C", root, "ls-files", "-z", "--cached", "--others", "--exclude-standard").Output()
	if err != nil {
		return err
	}
	for _, name := range strings.Split(strings.TrimRight(string(out), "\x00"), "\x00") {
		src := filepath.Join(root, name)
		fi, err := os.Lstat(src)
		if err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or not a file
		}
		dst := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := copyFile(src, dst, fi.Mode()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode.Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func tail(s string, lines int) string {
	l := strings.Split(s, "\n")
	return strings.Join(l[max(len(l)-lines, 0):], "\n")
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "plant:", err)
	os.Exit(1)
}
