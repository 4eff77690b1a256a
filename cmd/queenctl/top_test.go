package main

import (
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/creack/pty"

	"github.com/queenmq/ephemeral/client"
	"github.com/queenmq/ephemeral/internal/brokertest"
)

// TestRenderTop draws frames at fixed sizes: the sort by any column in
// either direction, the rates between two listings, the cut to the
// terminal's width and height.
func TestRenderTop(t *testing.T) {
	first := &client.QueuesResult{Queues: []client.QueueInfo{
		{Queue: "alpha", Tier: "declared", Depth: 5, Bytes: 50, Partitions: 1, Groups: 1},
		{Queue: "beta", Tier: "implicit", Depth: 20, Bytes: 10, Partitions: 2, Drops: client.Drops{TTL: 3}},
		{Queue: "gamma", Tier: "implicit", Depth: 1, Bytes: 900, Partitions: 1},
	}, Count: 3, CellBytes: 4096}
	rows := snapshot(first, nil, 0)
	for _, r := range rows {
		if r.depthRate != nil || r.dropRate != nil {
			t.Fatalf("a first listing has rates: %+v", r)
		}
	}
	second := *first
	second.Queues = append([]client.QueueInfo(nil), first.Queues...)
	second.Queues[1].Depth, second.Queues[1].Drops.TTL = 10, 7 // -10 and 4 new drops in 2 s
	rows = snapshot(&second, rows, 2*time.Second)
	paused := true
	st := topState{url: "http://b:6632", at: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), rows: rows, cellBytes: 4096, paused: &paused}

	order := func(frame string) []string {
		var names []string
		for _, l := range strings.Split(frame, "\n")[3:] {
			if f := strings.Fields(l); len(f) > 0 && (f[0] == "alpha" || f[0] == "beta" || f[0] == "gamma") {
				names = append(names, f[0])
			}
		}
		return names
	}
	frame := renderTop(st, 120, 10)
	lines := strings.Split(frame, "\n")
	if len(lines) != 10 {
		t.Fatalf("frame of %d lines, want 10:\n%s", len(lines), frame)
	}
	if want := "queenctl top  http://b:6632  03:04:05  3 queues  broker 4096 bytes  PAUSED (kill switch)"; lines[0] != want {
		t.Fatalf("title %q, want %q", lines[0], want)
	}
	if got := strings.Fields(lines[2]); strings.Join(got, " ") != "QUEUE▲ TIER DEPTH DEPTH/S BYTES PARTS GROUPS DROP:BOUNDS DROP:TTL DROP:RETRY DROPS/S" {
		t.Fatalf("header %q", lines[2])
	}
	if got := strings.Join(strings.Fields(lines[4]), " "); got != "beta implicit 10 -5.0 10 2 0 0 7 0 +2.0" {
		t.Fatalf("beta's row %q", got)
	}
	if got := order(frame); fmt.Sprint(got) != "[alpha beta gamma]" {
		t.Fatalf("sorted by queue: %v", got)
	}
	if !strings.HasPrefix(lines[9], "←/→ sort column") {
		t.Fatalf("footer %q", lines[9])
	}
	for col, want := range map[int]string{2: "[gamma alpha beta]", 4: "[beta alpha gamma]", 3: "[beta alpha gamma]", 10: "[alpha gamma beta]"} {
		st.sortCol, st.desc = col, false
		if got := order(renderTop(st, 120, 10)); fmt.Sprint(got) != want {
			t.Fatalf("sorted by %s: %v, want %s", topColumns[col].title, got, want)
		}
	}
	st.sortCol, st.desc = 4, true // bytes, largest first
	frame = renderTop(st, 120, 10)
	if got := order(frame); fmt.Sprint(got) != "[gamma alpha beta]" || !strings.Contains(frame, "BYTES▼") {
		t.Fatalf("sorted by bytes descending: %v\n%s", got, frame)
	}

	// Small: every line within the width, the rows that do not fit counted.
	frame = renderTop(st, 40, 6)
	lines = strings.Split(frame, "\n")
	if len(lines) != 6 || lines[4] != "… 2 more" {
		t.Fatalf("40x6 frame:\n%s", frame)
	}
	for _, l := range lines {
		if utf8.RuneCountInString(l) > 40 {
			t.Fatalf("line wider than 40: %q", l)
		}
	}
	// What the server named is drawn escaped, and measured escaped: the
	// frame keeps to its width.
	evil := st
	evil.rows = append(slices.Clone(rows), topRow{queue: evilQueue, tier: evilTier})
	evil.err = evilText
	frame = renderTop(evil, 120, 10)
	inert(t, "a frame of evil strings", frame)
	if !strings.Contains(frame, "error: "+evilTextSeen) || !strings.Contains(frame, evilQueueSeen[:38]) || !strings.Contains(frame, evilTierSeen) {
		t.Fatalf("a frame of evil strings:\n%s", frame)
	}
	for _, l := range strings.Split(frame, "\n") {
		if utf8.RuneCountInString(l) > 120 {
			t.Fatalf("line wider than 120: %q", l)
		}
	}
	if got := renderTop(st, 5, 2); !strings.Contains(got, "too small") {
		t.Fatalf("a 5x2 terminal: %q", got)
	}
}

// TestTopInTerminal runs `queenctl top` in a pseudo-terminal of 100x20
// against a real broker: the first frame lists the queues with their
// depths, a rate appears once pushes land between two refreshes, the
// arrow key moves the sort, and q quits with exit 0. --once draws a frame
// without a terminal, and top without one is refused.
func TestTopInTerminal(t *testing.T) {
	t.Parallel()
	url := brokertest.StartQueen(t, nil).URL()
	ctl(t, url, "", "push", "orders", "1", "2", "3").ok(t, "push orders")
	ctl(t, url, "", "push", "audit", "1").ok(t, "push audit")

	cmd := exec.Command(brokertest.Binary(t, queenctl), "top")
	cmd.Env = append(ctlEnv(url), "TERM=xterm-256color")
	term, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 20, Cols: 100})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		term.Close()
	})
	out := &brokertest.LockedBuffer{}
	go emulate(out, term)

	screen := readUntil(t, out, regexp.MustCompile(`(?s)QUEUE▲.*audit +implicit +1 .*orders +implicit +3 `), "first frame")
	if !strings.Contains(screen, "2 queues") || !strings.Contains(screen, "serving") || !strings.Contains(screen, "q quit") {
		t.Fatalf("first frame lacks its title or footer:\n%s", screen)
	}
	// Pushes between two refreshes show as a positive depth rate.
	ctl(t, url, "", "push", "orders", "4", "5", "6", "7").ok(t, "push during top")
	readUntil(t, out, regexp.MustCompile(`orders +implicit +7 +\+[1-9][0-9]*\.[0-9] `), "depth rate")
	// → moves the sort to TIER, r reverses it.
	if _, err := term.Write([]byte("\x1b[C")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, out, regexp.MustCompile(`QUEUE +TIER▲`), "sort by tier")
	if _, err := term.Write([]byte("r")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, out, regexp.MustCompile(`TIER▼`), "reversed sort")
	if _, err := term.Write([]byte("q")); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("top after q: %v\n%s", err, stripANSI(out.String()))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("top did not quit on q")
	}

	r := ctl(t, url, "", "top", "--once", "--width", "80").ok(t, "top --once")
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	if len(lines) != 6 || !strings.HasPrefix(lines[2], "QUEUE▲") ||
		!strings.HasPrefix(strings.Join(strings.Fields(lines[4]), " "), "orders implicit 7 - ") {
		t.Fatalf("top --once:\n%s", r.stdout)
	}
	ctl(t, url, "", "top").want(t, "top without a terminal", 2, "top needs a terminal; use --once")
}
