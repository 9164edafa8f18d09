// Package docs holds the documentation's own test: every Go block in
// README.md and docs/*.md is compiled by a test or marked as a fragment,
// and every relative link points at a file and heading that exist.
package docs

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// firstProgramMarker precedes the README's first program, which
// examples/firstprogram's test compiles, runs and compares with the README.
const firstProgramMarker = "<!-- examples/firstprogram/main.go: a test checks that this block is that file -->"

// fileMarker, on the line before a Go block of any page, says that the
// block is that file of examples/, which the example's own test compiles,
// runs and compares with the page (examples/observability for
// observability.md).
var fileMarker = regexp.MustCompile(`^<!-- (examples/[a-z0-9]+/main\.go): a test checks that this block is that file -->$`)

// fragmentMarker, on the line before a Go block, marks it as a fragment; so
// does the info string "go fragment".
const fragmentMarker = "<!-- fragment -->"

// maxREADMEBytes keeps the README a front door (issue 27).
const maxREADMEBytes = 15 << 10

// pages returns README.md and docs/*.md, relative to this directory.
func pages(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../README.md"}, files...)
}

var fence = regexp.MustCompile("^\\s*(```+|~~~+)\\s*(.*)$")

// block is a fenced code block: where it starts, its info string, and the
// non-blank line before it.
type block struct {
	line int
	info string
	prev string
}

// blocks returns the fenced code blocks of a markdown text.
func blocks(text string) []block {
	var out []block
	var open string // the opening fence while inside a block
	prev := ""
	for i, line := range strings.Split(text, "\n") {
		m := fence.FindStringSubmatch(line)
		switch {
		case open == "" && m != nil:
			out = append(out, block{line: i + 1, info: m[2], prev: prev})
			open = m[1]
		case open != "" && m != nil && m[2] == "" && strings.HasPrefix(m[1], open):
			open = ""
		}
		if strings.TrimSpace(line) != "" {
			prev = strings.TrimSpace(line)
		}
	}
	return out
}

// isGo says whether an info string names Go, and whether it marks a fragment.
func isGo(info string) (goBlock, fragment bool) {
	fields := strings.Fields(info)
	if len(fields) == 0 || (fields[0] != "go" && fields[0] != "golang") {
		return false, false
	}
	for _, f := range fields[1:] {
		if f == "fragment" {
			return true, true
		}
	}
	return true, false
}

func TestGoBlocksAreCompiledOrFragments(t *testing.T) {
	firstPrograms := 0
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range blocks(string(text)) {
			goBlock, fragment := isGo(b.info)
			switch {
			case !goBlock, fragment, b.prev == fragmentMarker:
			case page == "../README.md" && b.prev == firstProgramMarker:
				firstPrograms++
			case fileMarker.MatchString(b.prev):
				file := fileMarker.FindStringSubmatch(b.prev)[1]
				if _, err := os.Stat(filepath.Join("..", file)); err != nil {
					t.Errorf("%s:%d: the block is said to be %s: %v", page, b.line, file, err)
				}
				if _, err := os.Stat(filepath.Join("..", filepath.Dir(file), "main_test.go")); err != nil {
					t.Errorf("%s:%d: no test of %s checks the block: %v", page, b.line, file, err)
				}
			default:
				t.Errorf("%s:%d: a Go block that no test compiles: mark it ```go fragment (or %s on the line before), or make it a compiled example (a file of examples/ named on the line before, as observability.md's)", page, b.line, fragmentMarker)
			}
		}
	}
	if firstPrograms != 1 {
		t.Errorf("README.md: %d blocks after %q, want 1 (the first program)", firstPrograms, firstProgramMarker)
	}
}

func TestBlocksFindsUnmarkedGo(t *testing.T) {
	text := "x\n```go\nfoo()\n```\n\n<!-- fragment -->\n```go\nbar()\n```\n  ```go fragment\n  baz()\n  ```\n```\nshell\n```\n"
	var unmarked []int
	for _, b := range blocks(text) {
		if goBlock, fragment := isGo(b.info); goBlock && !fragment && b.prev != fragmentMarker {
			unmarked = append(unmarked, b.line)
		}
	}
	if len(unmarked) != 1 || unmarked[0] != 2 {
		t.Errorf("unmarked Go blocks at lines %v, want [2]", unmarked)
	}
}

func TestREADMEIsAFrontDoor(t *testing.T) {
	fi, err := os.Stat("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > maxREADMEBytes {
		t.Errorf("README.md is %d bytes, over %d: move the detail to a docs/ page and link it", fi.Size(), maxREADMEBytes)
	}
}

var link = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// anchor is GitHub's anchor for a heading: lower case, punctuation other
// than '-' and '_' dropped, spaces as '-'.
func anchor(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of a markdown file's headings, outside code blocks.
func anchors(t *testing.T, path string) map[string]bool {
	text, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	inCode := false
	for _, line := range strings.Split(string(text), "\n") {
		if fence.MatchString(line) {
			inCode = !inCode
			continue
		}
		if !inCode && strings.HasPrefix(line, "#") {
			out[anchor(strings.TrimLeft(line, "#"))] = true
		}
	}
	return out
}

func TestRelativeLinksResolve(t *testing.T) {
	for _, page := range pages(t) {
		text, err := os.ReadFile(page)
		if err != nil {
			t.Fatal(err)
		}
		inCode := false
		for i, line := range strings.Split(string(text), "\n") {
			if fence.MatchString(line) {
				inCode = !inCode
				continue
			}
			if inCode {
				continue
			}
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, frag, _ := strings.Cut(target, "#")
				path := page
				if file != "" {
					path = filepath.Join(filepath.Dir(page), file)
				}
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link %s: %v", page, i+1, target, err)
					continue
				}
				if frag != "" && strings.HasSuffix(path, ".md") && !anchors(t, path)[frag] {
					t.Errorf("%s:%d: link %s: no heading with that anchor", page, i+1, target)
				}
			}
		}
	}
}
