package reliability

// Figures is what one case measured, as the suite writes it to
// QUEEN_RELIABILITY_OUT (one JSON file per case) and reliability/cmd/report
// reads it: the one definition of that file's shape.
type Figures struct {
	Case        string             `json:"case"`
	Passed      bool               `json:"passed"`
	Scale       float64            `json:"scale"`
	BudgetBytes int64              `json:"budgetBytes"`
	BoundMiB    float64            `json:"boundMiB"`
	BaseRSSMiB  float64            `json:"baseRSSMiB"`
	PeakRSSMiB  float64            `json:"peakRSSMiB"`
	AfterRSSMiB float64            `json:"afterRSSMiB"`
	AfterS      float64            `json:"afterSeconds"`
	CapHit      bool               `json:"capHit"`
	HealthP50   float64            `json:"probeHealthP50ms"`
	HealthP99   float64            `json:"probeHealthP99ms"`
	PushPopP50  float64            `json:"probePushPopP50ms"`
	PushPopP99  float64            `json:"probePushPopP99ms"`
	ProbeErrors int                `json:"probeErrors"`
	DurationS   float64            `json:"durationSeconds"`
	Codes       map[string]int64   `json:"codes,omitempty"`
	Extra       map[string]float64 `json:"extra,omitempty"`
	Failures    []string           `json:"failures,omitempty"`
	Started     string             `json:"started"`
}
