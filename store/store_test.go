package store

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestUnavailable(t *testing.T) {
	err := Unavailable(io.ErrUnexpectedEOF)
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("Unavailable(cause) = %v: want both the sentinel and the cause", err)
	}
	if !strings.Contains(err.Error(), io.ErrUnexpectedEOF.Error()) {
		t.Fatalf("the cause is not in %q", err)
	}
	if Unavailable(nil) != nil || Unavailable(ErrClosed) != ErrClosed {
		t.Fatal("Unavailable wraps nil or an error that already is ErrUnavailable")
	}
	if !errors.Is(ErrClosed, ErrUnavailable) || errors.Is(ErrInvalid, ErrUnavailable) {
		t.Fatal("ErrClosed must be, and ErrInvalid must not be, ErrUnavailable")
	}
}

func TestValidate(t *testing.T) {
	ok := []Declaration{
		{"t", "q", []byte(`{}`)},
		{"t", strings.Repeat("é", MaxNameBytes/2), []byte(" {\"a\":1} ")},
	}
	for _, d := range ok {
		if err := d.Validate(); err != nil {
			t.Errorf("%q: %v", d.Queue, err)
		}
	}
	bad := []Declaration{
		{"", "q", []byte(`{}`)},
		{"t", strings.Repeat("é", MaxNameBytes/2) + "x", []byte(`{}`)},
		{"t", "q", nil},
		{"t", "q", []byte(`[]`)},
		{"t", "q", []byte(`{}{}`)},
	}
	for _, d := range bad {
		if err := d.Validate(); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q %q %q: %v, want ErrInvalid", d.Tenant, d.Queue, d.Options, err)
		}
	}
}

// A store that fails every call: the kill switch helpers pass errors on
// and read a missing switch as enabled.
type failing struct{ Store }

func (failing) GetSetting(context.Context, string) ([]byte, bool, error) {
	return nil, false, ErrClosed
}

func TestLoadKillSwitchError(t *testing.T) {
	k, found, err := LoadKillSwitch(context.Background(), failing{})
	if !errors.Is(err, ErrUnavailable) || found || !k.Enabled {
		t.Fatalf("LoadKillSwitch on a failing store = %+v %v %v", k, found, err)
	}
}
