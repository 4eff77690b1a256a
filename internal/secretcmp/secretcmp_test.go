package secretcmp

import (
	"bufio"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// No secret in the module is compared in variable time: every non-test .go
// file, package by package (testdata, vendor, node_modules and hidden
// directories left out). Test files compare what they expect, in time
// nobody measures.
func TestNoSecretComparedInVariableTime(t *testing.T) {
	root := filepath.Join("..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module's root: %v", err)
	}
	byDir := map[string][]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (name == "testdata" || name == "vendor" || name == "node_modules" || strings.HasPrefix(name, ".")) {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			byDir[filepath.Dir(p)] = append(byDir[filepath.Dir(p)], p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	for _, paths := range byDir {
		files += len(paths)
		found, err := CheckFiles(paths)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range found {
			t.Error(f)
		}
	}
	// The relay's handshake and identity's secrets are among what was read.
	for _, must := range []string{"cell/relay/handshake.go", "identity/identity.go"} {
		if !slices.Contains(byDir[filepath.Join(root, filepath.Dir(must))], filepath.Join(root, must)) {
			t.Fatalf("%s was not checked", must)
		}
	}
	t.Logf("%d files in %d directories checked", files, len(byDir))
}

// The check reports exactly the lines of testdata/fixture.go marked
// "// want": comparisons of secrets by ==, !=, bytes, strings, slices and
// reflect, through conversions, slices, calls and fields; and none of the
// allowed ones (hmac.Equal, subtle.ConstantTimeCompare, literals, nil,
// lengths, constants, size names, words that merely contain a secret word).
func TestCheckerFindsWhatItShould(t *testing.T) {
	const fixture = "testdata/fixture.go"
	found, err := CheckFiles([]string{fixture})
	if err != nil {
		t.Fatal(err)
	}
	var want, got []int
	f, err := os.Open(fixture)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		if strings.HasSuffix(sc.Text(), "// want") {
			want = append(want, line)
		}
	}
	for _, fd := range found {
		got = append(got, fd.Pos.Line)
	}
	if len(want) < 12 || !slices.Equal(got, want) {
		t.Fatalf("reported lines %v; want %v\n%v", got, want, found)
	}
}

func TestWords(t *testing.T) {
	for name, want := range map[string]string{
		"gwSecret":      "gw secret",
		"wantMAC":       "want mac",
		"HMACKey":       "hmac key",
		"session_token": "session token",
		"macLen":        "mac len",
		"x509Digest":    "x509 digest",
		"Token":         "token",
	} {
		if got := strings.Join(words(name), " "); got != want {
			t.Errorf("words(%q) = %q, want %q", name, got, want)
		}
	}
}
