package catalog

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEmbeddedContract(t *testing.T) {
	runContract(t, func(t *testing.T) backend {
		dir := t.TempDir()
		return backend{open: func() Store {
			s, err := Open(ctxT(t), "", dir)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}}
	})
}

func TestEmbeddedFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "a", "queen-data")
	s, err := Open(ctxT(t), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("data dir: %v %v, want 0700", fi.Mode(), err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "gateway.db")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("catalog file: %v %v, want 0600", fi.Mode(), err)
	}
	// The broker's own file is another file in the same directory.
	if _, err := os.Stat(filepath.Join(dir, "ephemeral.db")); !os.IsNotExist(err) {
		t.Fatalf("the catalog touched the broker's file: %v", err)
	}
}

// TestEmbeddedLocked: a second gateway on the same directory is refused
// (within the lock timeout) instead of sharing the file.
func TestEmbeddedLocked(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(ctxT(t), "", dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s2, err := Open(ctxT(t), "", dir)
	if err == nil || s2 != nil {
		t.Fatalf("second Open = %v, %v; want refused", s2, err)
	}
	if !strings.Contains(err.Error(), "is locked by another process") {
		t.Fatalf("second Open: %v", err)
	}
}

func TestOpenRefuses(t *testing.T) {
	if s, err := Open(ctxT(t), "", ""); err == nil || s != nil {
		t.Fatalf("Open with neither URL nor directory = %v, %v", s, err)
	}
	file := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(ctxT(t), "", file); err == nil || s != nil {
		t.Fatalf("Open with a file as the directory = %v, %v", s, err)
	}
}

func TestOpenEnv(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "queen-data")
	env := map[string]string{"QUEEN_DATA_DIR": dir}
	s, err := OpenEnv(ctxT(t), func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(*embedded); !ok {
		t.Fatalf("OpenEnv without QUEEN_DATABASE_URL = %T", s)
	}
	if _, err := os.Stat(filepath.Join(dir, FileName)); err != nil {
		t.Fatal(err)
	}
}
