package catalog

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/queenmq/ephemeral/internal/names"
)

// InvalidError is a refusal of arguments that can never be stored. Its
// message is meant for the client (the admin routes answer 400 with it);
// errors.Is(err, ErrInvalid) holds.
type InvalidError struct{ Msg string }

func (e *InvalidError) Error() string        { return e.Msg }
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, args ...any) error {
	return &InvalidError{Msg: fmt.Sprintf(format, args...)}
}

// checkName applies the broker's rule for names (D10, internal/names):
// non-empty UTF-8 of at most 512 bytes with no control character. Besides
// being what an operator expects, it keeps NUL out, which PostgreSQL text
// cannot hold and the embedded usage keys use as a separator.
func checkName(what, name string) error {
	if msg := names.Problem(what, name); msg != "" {
		return &InvalidError{Msg: msg}
	}
	return nil
}

// Validate checks the plan's name, that no number is negative, and that a
// bound on messages per period has a period.
func (p Plan) Validate() error {
	if err := checkName("plan name", p.Name); err != nil {
		return err
	}
	for _, f := range []struct {
		field string
		v     int64
	}{
		{"messagesPerPeriod", p.MessagesPerPeriod},
		{"periodSeconds", p.PeriodSeconds},
		{"messagesPerSecond", p.MessagesPerSecond},
		{"parkedSlots", p.ParkedSlots},
	} {
		if f.v < 0 {
			return invalid("%s must not be negative, got %d", f.field, f.v)
		}
	}
	if p.MessagesPerPeriod > 0 && p.PeriodSeconds == 0 {
		return invalid("periodSeconds must be positive when messagesPerPeriod is set")
	}
	return nil
}

// ValidatePlan is p.Validate, for callers that hold a Plan from elsewhere
// than DecodePlan.
func ValidatePlan(p Plan) error { return p.Validate() }

// Validate checks the tenant's name and its plan's.
func (t Tenant) Validate() error {
	if err := checkName("tenant name", t.Name); err != nil {
		return err
	}
	return checkName("plan", t.Plan)
}

// Validate checks one usage row: valid tenant and class names, a minute
// that starts a minute (not before 1970), a count that is not negative.
// The class is not limited to Messages and Deliveries, so that the proxy
// can meter a new class without a catalog change.
func (u Usage) Validate() error {
	if err := checkName("usage tenant", u.Tenant); err != nil {
		return err
	}
	if err := checkName("usage class", string(u.Class)); err != nil {
		return err
	}
	if u.Minute < 0 || u.Minute%60 != 0 {
		return invalid("usage minute must be a non-negative multiple of 60, got %d", u.Minute)
	}
	if u.Count < 0 {
		return invalid("usage count must not be negative, got %d", u.Count)
	}
	return nil
}

// usageKey is a usage row's identity.
type usageKey struct {
	tenant string
	class  Class
	minute int64
}

// mergeUsage validates every row and adds up the rows of one key, so that
// a backend writes each key once (and none whose counts add up to 0). The keys come back in one fixed order
// (tenant, class, minute), so that two gateways writing overlapping
// batches lock the rows in the same order and cannot deadlock.
func mergeUsage(rows []Usage) ([]Usage, error) {
	sums := make(map[usageKey]int64, len(rows))
	for _, u := range rows {
		if err := u.Validate(); err != nil {
			return nil, err
		}
		sums[usageKey{u.Tenant, u.Class, u.Minute}] += u.Count
	}
	out := make([]Usage, 0, len(sums))
	for k, n := range sums {
		if n == 0 {
			continue // nothing to count; keeps every stored count positive
		}
		out = append(out, Usage{Tenant: k.tenant, Class: k.class, Minute: k.minute, Count: n})
	}
	sortUsage(out)
	return out, nil
}

func sortUsage(rows []Usage) {
	slices.SortFunc(rows, func(a, b Usage) int {
		return cmp.Or(cmp.Compare(a.Tenant, b.Tenant), cmp.Compare(a.Class, b.Class), cmp.Compare(a.Minute, b.Minute))
	})
}
