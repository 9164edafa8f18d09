// Package docs holds the documentation's own test: every Go block of
// docs/*.md is a file of examples/, or a marked region of one, that the
// example's own test compiles and runs; the README's are that too or marked
// as fragments; and every relative link points at a file and heading that
// exist.
package docs

import (
	"fmt"
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

// regionMarker, on the line before a Go block of any page, says that the
// block is a region of that file of examples/: the lines between
// "// docs:begin NAME" and "// docs:end NAME", less the indentation they
// share. The example's own test compiles and runs the file; this package's
// test compares the block with the region.
var regionMarker = regexp.MustCompile(`^<!-- (examples/[a-z0-9]+/main\.go) region ([a-z0-9-]+): a test checks that this block is that part of the file -->$`)

// fragmentMarker, on the line before a Go block of the README, marks it as a
// fragment; so does the info string "go fragment". docs/*.md holds none
// (issue 41): every Go block there is a file or a region of examples/.
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

// block is a fenced code block: where it starts, its info string, the
// non-blank line before it, and its text (the lines between the fences, each
// ending in a newline).
type block struct {
	line int
	info string
	prev string
	text string
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
		case open != "":
			out[len(out)-1].text += line + "\n"
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

// region returns the lines of src between "// docs:begin name" and
// "// docs:end name", less the leading white space they all share and the
// blank lines at either end (gofmt puts one between a function and a
// comment after it), or an error when there is not exactly one such region.
func region(src, name string) (string, error) {
	begin, end := "// docs:begin "+name, "// docs:end "+name
	var lines []string
	found, in := 0, false
	for _, line := range strings.Split(src, "\n") {
		switch strings.TrimSpace(line) {
		case begin:
			if in {
				return "", fmt.Errorf("%q inside the region it opens", begin)
			}
			found++
			in = true
			continue
		case end:
			if !in {
				return "", fmt.Errorf("%q without %q before it", end, begin)
			}
			in = false
			continue
		}
		if in {
			lines = append(lines, line)
		}
	}
	for len(lines) > 0 && strings.TrimSpace(lines[0]) == "" {
		lines = lines[1:]
	}
	for len(lines) > 0 && strings.TrimSpace(lines[len(lines)-1]) == "" {
		lines = lines[:len(lines)-1]
	}
	switch {
	case found == 0:
		return "", fmt.Errorf("no line %q", begin)
	case found > 1:
		return "", fmt.Errorf("%d lines %q, want 1", found, begin)
	case in:
		return "", fmt.Errorf("no line %q after %q", end, begin)
	case len(lines) == 0:
		return "", fmt.Errorf("region %q is empty", name)
	}
	indent, first := "", true
	for _, line := range lines {
		if strings.TrimSpace(line) == "" {
			continue
		}
		lead := line[:len(line)-len(strings.TrimLeft(line, " \t"))]
		if first {
			indent, first = lead, false
		}
		for !strings.HasPrefix(lead, indent) {
			indent = indent[:len(indent)-1]
		}
	}
	var b strings.Builder
	for _, line := range lines {
		b.WriteString(strings.TrimPrefix(line, indent) + "\n")
	}
	return b.String(), nil
}

// checkExample checks that file (relative to the repository) exists beside
// the main_test.go that runs it, and that text is want, what the page
// should show.
func checkExample(t *testing.T, page string, b block, file string, want func(src string) (string, error)) {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", file))
	if err != nil {
		t.Errorf("%s:%d: the block is said to be %s: %v", page, b.line, file, err)
		return
	}
	if _, err := os.Stat(filepath.Join("..", filepath.Dir(file), "main_test.go")); err != nil {
		t.Errorf("%s:%d: no test of %s runs the block: %v", page, b.line, file, err)
	}
	text, err := want(string(src))
	if err != nil {
		t.Errorf("%s:%d: %s: %v", page, b.line, file, err)
		return
	}
	if b.text != text {
		t.Errorf("%s:%d: the block differs from %s: copy it into the page\n--- page\n%s--- %s\n%s", page, b.line, file, b.text, file, text)
	}
}

// fragmentRefused says whether b, a Go block of page, is a fragment that
// the page may not hold: every page but the README.
func fragmentRefused(page string, b block) bool {
	_, fragment := isGo(b.info)
	return page != "../README.md" && (fragment || b.prev == fragmentMarker)
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
			case !goBlock:
			case fragmentRefused(page, b):
				t.Errorf("%s:%d: a Go fragment: docs/ pages show only code that a test compiles and runs (issue 41): make it a file of examples/ or a region of one, with its marker on the line before (see regionMarker in docs_test.go)", page, b.line)
			case fragment, b.prev == fragmentMarker:
			case page == "../README.md" && b.prev == firstProgramMarker:
				firstPrograms++
			case fileMarker.MatchString(b.prev):
				file := fileMarker.FindStringSubmatch(b.prev)[1]
				checkExample(t, page, b, file, func(src string) (string, error) { return src, nil })
			case regionMarker.MatchString(b.prev):
				m := regionMarker.FindStringSubmatch(b.prev)
				checkExample(t, page, b, m[1], func(src string) (string, error) { return region(src, m[2]) })
			default:
				t.Errorf("%s:%d: a Go block that no test compiles: make it a compiled example, a file of examples/ (or a region of one) named on the line before, as observability.md's and cache.md's are", page, b.line)
			}
		}
	}
	if firstPrograms != 1 {
		t.Errorf("README.md: %d blocks after %q, want 1 (the first program)", firstPrograms, firstProgramMarker)
	}
}

func TestRegion(t *testing.T) {
	src := "package main\n\nfunc main() {\n\t// docs:begin a\n\tx := 1\n\n\tif x > 0 {\n\t\tx++\n\t}\n\n\t// docs:end a\n}\n"
	got, err := region(src, "a")
	if want := "x := 1\n\nif x > 0 {\n\tx++\n}\n"; err != nil || got != want {
		t.Errorf("region a = %q, %v; want %q", got, err, want)
	}
	for name, src := range map[string]string{
		"missing":   "x\n",
		"unclosed":  "// docs:begin a\nx\n",
		"twice":     "// docs:begin a\nx\n// docs:end a\n// docs:begin a\ny\n// docs:end a\n",
		"end first": "// docs:end a\n// docs:begin a\nx\n// docs:end a\n",
		"empty":     "// docs:begin a\n// docs:end a\n",
	} {
		if got, err := region(src, "a"); err == nil {
			t.Errorf("%s: region = %q, want an error", name, got)
		}
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

func TestDocsPagesRefuseFragments(t *testing.T) {
	text := "```go fragment\nfoo()\n```\n\n<!-- fragment -->\n```go\nbar()\n```\n"
	for _, b := range blocks(text) {
		if !fragmentRefused("cache.md", b) {
			t.Errorf("cache.md: the fragment at line %d is accepted", b.line)
		}
		if fragmentRefused("../README.md", b) {
			t.Errorf("README.md: the fragment at line %d is refused", b.line)
		}
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
