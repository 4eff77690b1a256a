package wire

import (
	"strings"
	"testing"
)

func TestParseCellView(t *testing.T) {
	for _, tc := range []struct {
		query   string
		want    CellViewParams
		refused string
	}{
		{"", CellViewParams{TimeoutMs: 30000}, ""},
		{"after=7", CellViewParams{After: 7, HasAfter: true, TimeoutMs: 30000}, ""},
		{"after=0&timeout=1500&other=x", CellViewParams{After: 0, HasAfter: true, TimeoutMs: 1500}, ""},
		{"timeout=999999999", CellViewParams{TimeoutMs: MaxPopTimeoutMs}, ""},
		{"after=18446744073709551615", CellViewParams{After: 1<<64 - 1, HasAfter: true, TimeoutMs: 30000}, ""},
		{"after=99999999999999999999999", CellViewParams{After: 1<<64 - 1, HasAfter: true, TimeoutMs: 30000}, ""},
		{"%61fter=3", CellViewParams{After: 3, HasAfter: true, TimeoutMs: 30000}, ""},
		{"after=", CellViewParams{}, "after must be a non-negative integer (the generation last answered), not empty"},
		{"after=-1", CellViewParams{}, "after must be a non-negative integer"},
		{"after=1.5", CellViewParams{}, "after must be a non-negative integer"},
		{"after=1&after=2", CellViewParams{}, "the query parameter after appears twice"},
		{"timeout=1&timeout=2", CellViewParams{}, "the query parameter timeout appears twice"},
		{"timeout=x", CellViewParams{}, "timeout must be a non-negative integer (milliseconds)"},
	} {
		p, err := ParseCellView(reqWithTarget(t, "/api/v1/ephemeral/cell?"+tc.query).Query(), 30000)
		if tc.refused != "" {
			werr, ok := err.(*Error)
			if !ok || werr.Status != 400 || werr.Code != CodeBadRequest || !strings.Contains(werr.Msg, tc.refused) {
				t.Errorf("%q: %v, want 400 %s %q", tc.query, err, CodeBadRequest, tc.refused)
			}
			continue
		}
		if err != nil || p != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.query, p, err, tc.want)
		}
	}
}
