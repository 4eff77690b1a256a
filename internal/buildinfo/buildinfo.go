// Package buildinfo says what a binary of this repository is: the version
// and commit `make build` stamps with -ldflags, or, for a binary built
// another way (go build, go run, go install), what the Go toolchain
// recorded in it. The broker (queen) and the CLI (queenctl) print it for
// --version; the broker also answers it in /health and
// queen_ephemeral_build_info.
package buildinfo

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Build is what a binary says about itself: `queen --version`, /health's
// "version" and queen_ephemeral_build_info.
type Build struct {
	Version string // the stamped version, else the module's, else dev-<revision>
	Commit  string // the source revision, "-dirty" when the tree had changes; "" when unknown
	Go      string // the toolchain that built it
}

// Read is this binary's build: stampedVersion and stampedCommit are what
// -ldflags stamped into its main package ("dev" and "" when nothing was),
// the rest is read from the build info the Go toolchain embeds.
func Read(stampedVersion, stampedCommit string) Build {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = nil
	}
	return identify(stampedVersion, stampedCommit, bi)
}

// identify chooses the build's identity: what -ldflags stamped wins; what
// it left unset comes from bi (nil when the binary has none). The module
// version is the Go toolchain's: "v1.2.3" for `go install ...@v1.2.3`,
// since Go 1.24 a pseudo-version naming the revision (with "+dirty") for
// a `go build` in a checkout, and "(devel)" when it knows nothing, which
// is no better than the revision.
func identify(stampedVersion, stampedCommit string, bi *debug.BuildInfo) Build {
	b := Build{Version: stampedVersion, Commit: stampedCommit, Go: runtime.Version()}
	if bi == nil {
		if b.Version == "" {
			b.Version = "dev"
		}
		return b
	}
	var rev string
	var modified bool
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		}
	}
	if rev != "" && modified {
		rev += "-dirty"
	}
	if b.Commit == "" {
		b.Commit = rev
	}
	if b.Version == "" || b.Version == "dev" {
		switch mv := bi.Main.Version; {
		case mv != "" && mv != "(devel)":
			b.Version = mv
		case rev != "":
			b.Version = "dev-" + Short(rev)
		default:
			b.Version = "dev"
		}
	}
	if bi.GoVersion != "" {
		b.Go = bi.GoVersion
	}
	return b
}

// Short is a revision's first 12 hex digits, "-dirty" kept.
func Short(rev string) string {
	const n = 12
	if len(rev) <= n {
		return rev
	}
	hex, dirty := rev, ""
	if len(rev) > 6 && rev[len(rev)-6:] == "-dirty" {
		hex, dirty = rev[:len(rev)-6], "-dirty"
	}
	if len(hex) > n {
		hex = hex[:n]
	}
	return hex + dirty
}

// Print writes what --version prints for the binary named name: the
// version, the commit and the toolchain, one to a line.
func Print(w io.Writer, name string, b Build) {
	c := b.Commit
	if c == "" {
		c = "unknown"
	}
	fmt.Fprintf(w, "%s %s\ncommit %s\ngo %s %s/%s\n", name, b.Version, c, b.Go, runtime.GOOS, runtime.GOARCH)
}
