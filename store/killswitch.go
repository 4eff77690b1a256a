package store

import (
	"context"
	"encoding/json"
	"fmt"
)

// KeyKillSwitch is the setting that holds the kill switch (D15), so that a
// paused broker restarts paused and every broker of a cell reads one row.
const KeyKillSwitch = "kill_switch"

// KillSwitch is the stored kill switch: Enabled false means paused.
type KillSwitch struct {
	Enabled           bool  `json:"enabled"`
	RetryAfterSeconds int64 `json:"retryAfterSeconds"`
}

// LoadKillSwitch reads the kill switch; found is false when none was ever
// written (the surface is enabled).
func LoadKillSwitch(ctx context.Context, s Store) (k KillSwitch, found bool, err error) {
	v, found, err := s.GetSetting(ctx, KeyKillSwitch)
	if err != nil || !found {
		return KillSwitch{Enabled: true}, false, err
	}
	if err := json.Unmarshal(v, &k); err != nil {
		return KillSwitch{Enabled: true}, false, fmt.Errorf("store: kill switch setting %q: %w", v, err)
	}
	return k, true, nil
}

// SaveKillSwitch writes the kill switch.
func SaveKillSwitch(ctx context.Context, s Store, k KillSwitch) error {
	if k.RetryAfterSeconds < 0 {
		return fmt.Errorf("%w: retryAfterSeconds must be non-negative", ErrInvalid)
	}
	v, _ := json.Marshal(k) // a struct of a bool and an int cannot fail
	return s.PutSetting(ctx, KeyKillSwitch, v)
}
