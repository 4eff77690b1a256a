package store

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// MaxNameBytes bounds tenant and queue names (D10). MaxKeyBytes bounds
// setting keys.
const (
	MaxNameBytes = 512
	MaxKeyBytes  = 256
)

// ValidateName checks what both stores need of a tenant or queue name:
// non-empty, valid UTF-8, no NUL (PostgreSQL text cannot hold one) and at
// most MaxNameBytes. The server's own rule (D10) is stricter.
func ValidateName(what, name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(name) > MaxNameBytes:
		return fmt.Errorf("%w: %s is %d bytes, over %d", ErrInvalid, what, len(name), MaxNameBytes)
	case !utf8.ValidString(name):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: %s contains NUL", ErrInvalid, what)
	}
	return nil
}

// Validate checks d's names and that Options is one valid JSON object.
func (d Declaration) Validate() error {
	if err := ValidateName("tenant", d.Tenant); err != nil {
		return err
	}
	if err := ValidateName("queue", d.Queue); err != nil {
		return err
	}
	if !json.Valid(d.Options) {
		return fmt.Errorf("%w: options are not valid JSON", ErrInvalid)
	}
	if t := bytes.TrimLeft(d.Options, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return fmt.Errorf("%w: options are not a JSON object", ErrInvalid)
	}
	if !utf8.Valid(d.Options) || bytes.IndexByte(d.Options, 0) >= 0 {
		return fmt.Errorf("%w: options are not NUL-free UTF-8", ErrInvalid)
	}
	return nil
}

// Validate checks g's tenant and that no allowance is negative.
func (g Grant) Validate() error {
	if err := ValidateName("tenant", g.Tenant); err != nil {
		return err
	}
	if g.MaxBytes < 0 || g.MaxQueues < 0 || g.MessagesPerSecond < 0 {
		return fmt.Errorf("%w: grant values must be non-negative", ErrInvalid)
	}
	return nil
}

// ValidateKey checks a setting key: non-empty, valid UTF-8, no NUL, at most
// MaxKeyBytes.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("%w: empty setting key", ErrInvalid)
	case len(key) > MaxKeyBytes:
		return fmt.Errorf("%w: setting key over %d bytes", ErrInvalid, MaxKeyBytes)
	case !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0:
		return fmt.Errorf("%w: setting key is not NUL-free UTF-8", ErrInvalid)
	}
	return nil
}
