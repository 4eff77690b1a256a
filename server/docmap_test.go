package server

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// TestDocMapsEveryFile checks that doc.go, the package's map, names every
// file of the package (as name.go) and no file that is not there, so that a
// file added, moved or renamed cannot leave the map stale.
func TestDocMapsEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") || name == "doc.go" {
			continue
		}
		files[name] = true
		if !regexp.MustCompile(`\b` + regexp.QuoteMeta(name)).Match(doc) {
			t.Errorf("doc.go does not name %s", name)
		}
	}
	for _, m := range regexp.MustCompile(`\b[a-z0-9_]+\.go\b`).FindAllString(string(doc), -1) {
		if !files[m] && m != "doc.go" {
			t.Errorf("doc.go names %s, which is not a file of the package", m)
		}
	}
}
