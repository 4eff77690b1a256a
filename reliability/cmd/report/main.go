// Command report turns the reliability suite's results (the JSON files a
// run writes under QUEEN_RELIABILITY_OUT, one per case) into the markdown
// table of RELIABILITY.md:
//
//	go run ./reliability/cmd/report reliability/results/20261201T020000Z
package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/queenmq/ephemeral/reliability"
)

// figures is one case's file, as the suite writes it.
type figures = reliability.Figures

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: report RESULTS_DIR")
		os.Exit(2)
	}
	files, err := filepath.Glob(filepath.Join(os.Args[1], "*.json"))
	if err != nil || len(files) == 0 {
		fmt.Fprintf(os.Stderr, "no results in %s\n", os.Args[1])
		os.Exit(1)
	}
	sort.Strings(files)
	fmt.Println("| case | result | peak RSS MiB (bound) | RSS after MiB (idle) | probe p99 ms /health, push+pop | answers | other figures |")
	fmt.Println("| --- | --- | ---: | ---: | ---: | --- | --- |")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		var r figures
		if err := json.Unmarshal(b, &r); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", f, err)
			os.Exit(1)
		}
		fmt.Println(row(r))
	}
}

func row(r figures) string {
	result := "pass"
	if !r.Passed {
		result = fmt.Sprintf("**FAIL** (%d)", len(r.Failures))
	}
	peak := fmt.Sprintf("%.0f (%.0f)", r.PeakRSSMiB, r.BoundMiB)
	if r.CapHit {
		peak = "≥ " + peak + ", cap hit"
	}
	after := "–"
	if r.AfterRSSMiB > 0 {
		after = fmt.Sprintf("%.0f after %.0f s (%.0f)", r.AfterRSSMiB, r.AfterS, r.BaseRSSMiB)
	}
	probe := "–"
	if r.HealthP99 > 0 || r.PushPopP99 > 0 {
		probe = fmt.Sprintf("%.1f, %.1f", r.HealthP99, r.PushPopP99)
		if r.ProbeErrors > 0 {
			probe += fmt.Sprintf(", %d failed", r.ProbeErrors)
		}
	}
	var codes []string
	for _, k := range slices.Sorted(maps.Keys(r.Codes)) {
		codes = append(codes, fmt.Sprintf("%s ×%d", k, r.Codes[k]))
	}
	var extra []string
	for _, k := range slices.Sorted(maps.Keys(r.Extra)) {
		extra = append(extra, fmt.Sprintf("%s %.4g", k, r.Extra[k]))
	}
	return fmt.Sprintf("| %s | %s | %s | %s | %s | %s | %s |", r.Case, result, peak, after, probe,
		strings.Join(codes, "; "), strings.Join(extra, "; "))
}
