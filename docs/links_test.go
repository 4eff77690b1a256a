package docs_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// linkRE is a Markdown link's target: [text](target).
var linkRE = regexp.MustCompile(`\]\(([^)\s]+)\)`)

// codeSpanRE is an inline code span, whose brackets are not links.
var codeSpanRE = regexp.MustCompile("`[^`]*`")

// TestRelativeLinks checks that every relative link of every Markdown file
// in the module (markdownFiles) names a file or
// directory that exists and, for a link into a Markdown file with a
// #fragment, a heading of that file, as GitHub names its anchors: moving a
// section between files must move its links too.
func TestRelativeLinks(t *testing.T) {
	root, err := brokertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]map[string]bool{} // file -> its anchors, read once
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		a := headingAnchors(string(b))
		anchors[path] = a
		return a
	}
	checked := 0
	for _, rel := range markdownFiles(t, root) {
		path := filepath.Join(root, rel)
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range proseLines(string(b)) {
			if line == "" {
				continue
			}
			for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				dest := path
				if file != "" {
					dest = filepath.Join(filepath.Dir(path), file)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d: link %q: no such file or directory", rel, i+1, target)
						continue
					}
				}
				if frag != "" && strings.HasSuffix(dest, ".md") && !anchorsOf(dest)[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading whose anchor is #%s", rel, i+1, target, filepath.Base(dest), frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the walk is broken")
	}
}

// proseLines are the file's lines with those inside fenced code blocks
// blanked, so that line numbers stay the file's.
func proseLines(s string) []string {
	lines := strings.Split(s, "\n")
	inFence := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
			lines[i] = ""
			continue
		}
		if inFence {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors are the anchors GitHub gives a file's headings: the text
// lower-cased, links and code marks reduced to their text, every character
// but letters, digits, '-', '_' and spaces removed, spaces made '-', and a
// repeated anchor suffixed -1, -2...; and the ids of HTML anchors.
func headingAnchors(s string) map[string]bool {
	a := map[string]bool{}
	for _, m := range regexp.MustCompile(`<a (?:name|id)="([^"]+)"`).FindAllStringSubmatch(s, -1) {
		a[m[1]] = true
	}
	linkText := regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	for _, l := range proseLines(s) {
		if !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		text = linkText.ReplaceAllString(text, "$1")
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case r == ' ':
				b.WriteByte('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if !a[slug] {
			a[slug] = true
			continue
		}
		for n := 1; ; n++ {
			if s := slug + "-" + strconv.Itoa(n); !a[s] {
				a[s] = true
				break
			}
		}
	}
	return a
}

// markdownFiles are the module's Markdown files, relative to root, less
// those under hidden directories and node_modules (npm's copies).
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			rel, _ := filepath.Rel(root, path)
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}
