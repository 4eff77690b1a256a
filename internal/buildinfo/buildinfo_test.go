package buildinfo

import (
	"bytes"
	"runtime"
	"runtime/debug"
	"testing"
)

// identify: what -ldflags stamped wins; what it left unset comes from the
// build info (module version, else dev-<revision>, else dev).
func TestIdentify(t *testing.T) {
	const rev = "0123456789abcdef0123456789abcdef01234567"
	info := func(mod string, settings ...string) *debug.BuildInfo {
		bi := &debug.BuildInfo{GoVersion: "go1.99.1", Main: debug.Module{Path: "github.com/queenmq/ephemeral", Version: mod}}
		for i := 0; i+1 < len(settings); i += 2 {
			bi.Settings = append(bi.Settings, debug.BuildSetting{Key: settings[i], Value: settings[i+1]})
		}
		return bi
	}
	for _, c := range []struct {
		name           string
		stamped, commt string
		bi             *debug.BuildInfo
		want           Build
	}{
		{"stamped wins", "v1.2.3", "abc", info("v9.9.9", "vcs.revision", rev),
			Build{"v1.2.3", "abc", "go1.99.1"}},
		{"stamped version, commit from vcs", "v1.2.3", "", info("(devel)", "vcs.revision", rev, "vcs.modified", "false"),
			Build{"v1.2.3", rev, "go1.99.1"}},
		{"go install @version", "dev", "", info("v0.4.0"),
			Build{"v0.4.0", "", "go1.99.1"}},
		{"go build in a checkout: pseudo-version", "dev", "", info("v0.0.0-20261201070142-0123456789ab+dirty", "vcs.revision", rev, "vcs.modified", "true"),
			Build{"v0.0.0-20261201070142-0123456789ab+dirty", rev + "-dirty", "go1.99.1"}},
		{"(devel) with a revision", "dev", "", info("(devel)", "vcs.revision", rev, "vcs.modified", "true"),
			Build{"dev-0123456789ab-dirty", rev + "-dirty", "go1.99.1"}},
		{"(devel) and nothing else", "dev", "", info("(devel)"),
			Build{"dev", "", "go1.99.1"}},
		{"no build info", "dev", "", nil,
			Build{"dev", "", runtime.Version()}},
	} {
		if got := identify(c.stamped, c.commt, c.bi); got != c.want {
			t.Errorf("%s: identify = %+v, want %+v", c.name, got, c.want)
		}
	}
	var b bytes.Buffer
	Print(&b, "queen", Build{"v1.2.3", "", "go1.99.1"})
	if want := "queen v1.2.3\ncommit unknown\ngo go1.99.1 " + runtime.GOOS + "/" + runtime.GOARCH + "\n"; b.String() != want {
		t.Errorf("Print:\n%s\nwant:\n%s", b.String(), want)
	}
}
