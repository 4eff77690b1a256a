package docs_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestLayoutIsComplete checks that development.md's Layout names every
// directory of the repository's top level (as `dir/`), every command (as
// `cmd/name`) and every package under internal/ (as `name`), so that a new
// one cannot be left out of the map a newcomer reads.
func TestLayoutIsComplete(t *testing.T) {
	root, err := brokertest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "docs", "development.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Layout\n")
	if start < 0 {
		t.Fatal("docs/development.md has no '## Layout' section")
	}
	layout := doc[start+1:]
	if end := strings.Index(layout[len("## Layout"):], "\n## "); end >= 0 {
		layout = layout[:len("## Layout")+end]
	}
	// What make build, a broker run in the checkout and npm leave there.
	ignored := map[string]bool{"bin": true, "queen-data": true, "queen-gateway-data": true, "node_modules": true}
	dirs := func(dir string) []string {
		entries, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range entries {
			if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && !ignored[e.Name()] {
				names = append(names, e.Name())
			}
		}
		return names
	}
	for _, d := range dirs(".") {
		switch d {
		case "cmd":
			for _, c := range dirs("cmd") {
				if !strings.Contains(layout, "`cmd/"+c+"`") {
					t.Errorf("docs/development.md, Layout: the command cmd/%s is not named (as `cmd/%s`)", c, c)
				}
			}
		case "internal":
			for _, p := range dirs("internal") {
				if !strings.Contains(layout, "`"+p+"`") {
					t.Errorf("docs/development.md, Layout: the package internal/%s is not named (as `%s`) in the internal/ row", p, p)
				}
			}
		default:
			if !strings.Contains(layout, "`"+d+"/") {
				t.Errorf("docs/development.md, Layout: the directory %s/ is not named (as `%s/`)", d, d)
			}
		}
	}
}
