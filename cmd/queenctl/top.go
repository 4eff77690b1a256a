package main

// top: the tenant's queues live, full screen, refreshed every second. The
// frame is drawn by renderTop, a pure function of the state and a size, so
// that tests draw it at a fixed size without a terminal.

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	tea "github.com/charmbracelet/bubbletea"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/queenmq/ephemeral/client"
)

// topRow is one queue of a frame; the rates are nil until two listings
// have been read (a rate needs an interval).
type topRow struct {
	queue, tier                      string
	owner                            string // the member that owns it, in a cell
	depth, bytes, partitions, groups int64
	bounds, ttl, retry               int64
	depthRate, dropRate              *float64
}

// topColumn is one column of the table: its header and how its cells are
// drawn and compared.
type topColumn struct {
	title string
	right bool // numbers are right-aligned
	cell  func(r *topRow) string
	cmp   func(a, b *topRow) int
}

func intCol(title string, f func(r *topRow) int64) topColumn {
	return topColumn{title: title, right: true,
		cell: func(r *topRow) string { return fmt.Sprint(f(r)) },
		cmp:  func(a, b *topRow) int { return cmp.Compare(f(a), f(b)) }}
}

func rateCol(title string, f func(r *topRow) *float64) topColumn {
	return topColumn{title: title, right: true,
		cell: func(r *topRow) string {
			if v := f(r); v != nil {
				return fmt.Sprintf("%+.1f", *v)
			}
			return "-"
		},
		cmp: func(a, b *topRow) int {
			va, vb := f(a), f(b)
			switch {
			case va == nil && vb == nil:
				return 0
			case va == nil:
				return -1
			case vb == nil:
				return 1
			}
			return cmp.Compare(*va, *vb)
		}}
}

var topColumns = []topColumn{
	{title: "QUEUE", cell: func(r *topRow) string { return visible(r.queue) }, cmp: func(a, b *topRow) int { return strings.Compare(a.queue, b.queue) }},
	{title: "TIER", cell: func(r *topRow) string { return visible(r.tier) }, cmp: func(a, b *topRow) int { return strings.Compare(a.tier, b.tier) }},
	intCol("DEPTH", func(r *topRow) int64 { return r.depth }),
	rateCol("DEPTH/S", func(r *topRow) *float64 { return r.depthRate }),
	intCol("BYTES", func(r *topRow) int64 { return r.bytes }),
	intCol("PARTS", func(r *topRow) int64 { return r.partitions }),
	intCol("GROUPS", func(r *topRow) int64 { return r.groups }),
	intCol("DROP:BOUNDS", func(r *topRow) int64 { return r.bounds }),
	intCol("DROP:TTL", func(r *topRow) int64 { return r.ttl }),
	intCol("DROP:RETRY", func(r *topRow) int64 { return r.retry }),
	rateCol("DROPS/S", func(r *topRow) *float64 { return r.dropRate }),
}

// ownerColumn is shown after QUEUE when top reads a cell.
var ownerColumn = topColumn{title: "OWNER", cell: func(r *topRow) string { return visible(r.owner) },
	cmp: func(a, b *topRow) int { return strings.Compare(a.owner, b.owner) }}

// columns answers the frame's columns: OWNER only in a cell, so that a
// single broker's frame is what it always was.
func (st *topState) columns() []topColumn {
	if !st.cell {
		return topColumns
	}
	return slices.Insert(slices.Clone(topColumns), 1, ownerColumn)
}

// topState is everything a frame shows.
type topState struct {
	url       string
	at        time.Time
	rows      []topRow
	cellBytes int64
	paused    *bool  // the kill switch; nil when it could not be read
	cell      bool   // the rows are a cell's, with owners
	members   string // in a cell: how many members answered, for the title
	err       string // the last refresh's failure, shown above the table
	sortCol   int    // index into topColumns
	desc      bool
}

// snapshot turns a listing into rows, with rates against prev (the rows of
// the listing read dt earlier).
func snapshot(res *client.QueuesResult, prev []topRow, dt time.Duration) []topRow {
	qs := make([]cellQueue, len(res.Queues))
	for i, q := range res.Queues {
		qs[i] = cellQueue{QueueInfo: q}
	}
	return snapshotRows(qs, prev, dt)
}

// snapshotRows is snapshot of a cell's merged listing (or of one broker's,
// without owners).
func snapshotRows(qs []cellQueue, prev []topRow, dt time.Duration) []topRow {
	before := make(map[string]*topRow, len(prev))
	for i := range prev {
		before[prev[i].queue] = &prev[i]
	}
	rows := make([]topRow, 0, len(qs))
	for _, q := range qs {
		r := topRow{queue: q.Queue, tier: q.Tier, owner: q.Owner, depth: int64(q.Depth), bytes: q.Bytes,
			partitions: int64(q.Partitions), groups: int64(q.Groups),
			bounds: q.Drops.Bounds, ttl: q.Drops.TTL, retry: q.Drops.Retry}
		if p := before[q.Queue]; p != nil && dt > 0 {
			s := dt.Seconds()
			dr := float64(r.depth-p.depth) / s
			// A restart zeroes the drop counters: no negative drop rate.
			xr := max(0, float64((r.bounds+r.ttl+r.retry)-(p.bounds+p.ttl+p.retry))/s)
			r.depthRate, r.dropRate = &dr, &xr
		}
		rows = append(rows, r)
	}
	return rows
}

// fit cuts s to w runes, or pads it to w.
func fit(s string, w int, right bool) string {
	if n := utf8.RuneCountInString(s); n > w {
		if w <= 1 {
			return string([]rune(s)[:w])
		}
		return string([]rune(s)[:w-1]) + "…"
	} else if n < w {
		if right {
			return strings.Repeat(" ", w-n) + s
		}
		return s + strings.Repeat(" ", w-n)
	}
	return s
}

// renderTop draws one frame of exactly height lines, none wider than width.
func renderTop(st topState, width, height int) string {
	if width < 10 || height < 4 {
		return "queenctl top: the terminal is too small"
	}
	rows := slices.Clone(st.rows)
	columns := st.columns()
	col := columns[min(st.sortCol, len(columns)-1)]
	slices.SortStableFunc(rows, func(a, b topRow) int {
		c := col.cmp(&a, &b)
		if st.desc {
			c = -c
		}
		if c == 0 {
			c = strings.Compare(a.queue, b.queue)
		}
		return c
	})

	// Column widths: the widest cell, header included (with its sort mark).
	cells := make([][]string, len(rows))
	widths := make([]int, len(columns))
	headers := make([]string, len(columns))
	for j, c := range columns {
		headers[j] = c.title
		if j == st.sortCol {
			if st.desc {
				headers[j] += "▼"
			} else {
				headers[j] += "▲"
			}
		}
		widths[j] = utf8.RuneCountInString(headers[j])
	}
	for i := range rows {
		cells[i] = make([]string, len(columns))
		for j, c := range columns {
			cells[i][j] = c.cell(&rows[i])
			widths[j] = max(widths[j], utf8.RuneCountInString(cells[i][j]))
		}
	}
	widths[0] = min(widths[0], 40) // a long queue name must not push every number off screen
	line := func(vals []string) string {
		parts := make([]string, len(vals))
		for j, v := range vals {
			parts[j] = fit(v, widths[j], columns[j].right)
		}
		return strings.Join(parts, "  ")
	}

	var lines []string
	state := "kill switch: ?"
	if st.paused != nil {
		state = "serving"
		if *st.paused {
			state = "PAUSED (kill switch)"
		}
	}
	if st.cell {
		lines = append(lines, fmt.Sprintf("queenctl top  %s  %s  %d queues  %s  cell %d bytes  %s",
			visible(st.url), st.at.Format("15:04:05"), len(rows), st.members, st.cellBytes, state))
	} else {
		lines = append(lines, fmt.Sprintf("queenctl top  %s  %s  %d queues  broker %d bytes  %s",
			visible(st.url), st.at.Format("15:04:05"), len(rows), st.cellBytes, state))
	}
	if st.err != "" {
		lines = append(lines, "error: "+visible(st.err))
	} else {
		lines = append(lines, "")
	}
	lines = append(lines, line(headers))
	room := height - len(lines) - 1 // the footer
	for i := range rows {
		if i == room-1 && len(rows) > room {
			lines = append(lines, fmt.Sprintf("… %d more", len(rows)-i))
			break
		}
		lines = append(lines, line(cells[i]))
	}
	for len(lines) < height-1 {
		lines = append(lines, "")
	}
	lines = append(lines, "←/→ sort column  r reverse  q quit")
	for i, l := range lines {
		if utf8.RuneCountInString(l) > width {
			lines[i] = fit(l, width, false)
		} else {
			lines[i] = strings.TrimRight(l, " ")
		}
	}
	return strings.Join(lines, "\n")
}

// The bubbletea program: a refresh every second, keys to sort and quit.

type refreshed struct {
	res    *client.QueuesResult // one broker's listing, or nil
	cell   *cellQueues          // a cell's, or nil
	paused *bool
	at     time.Time
	err    error
}

type tick struct{}

type topModel struct {
	c             *client.Client
	r             *cellReader // the listing: the cell's on a member, else this broker's
	ctx           context.Context
	st            topState
	width, height int
	last          time.Time // when the rows were read, for the rates
}

// refresh reads the listing and the kill switch (which needs the operator:
// when it cannot be read top shows "?" rather than failing). The kill
// switch is the URL given's: each member has its own.
func (m topModel) refresh() tea.Msg {
	ctx, cancel := context.WithTimeout(m.ctx, 5*time.Second)
	defer cancel()
	cell, res, err := m.r.read(ctx)
	var paused *bool
	if k, kerr := m.c.KillSwitch(ctx); kerr == nil {
		p := !k.Enabled
		paused = &p
	}
	return refreshed{res: res, cell: cell, paused: paused, at: time.Now(), err: err}
}

func (m topModel) Init() tea.Cmd { return m.refresh }

func (m topModel) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = msg.Width, msg.Height
	case tea.KeyMsg:
		switch msg.String() {
		case "q", "ctrl+c", "esc":
			return m, tea.Quit
		case "right", "l", ">", "tab":
			m.st.sortCol = (m.st.sortCol + 1) % len(m.st.columns())
		case "left", "h", "<", "shift+tab":
			n := len(m.st.columns())
			m.st.sortCol = (m.st.sortCol + n - 1) % n
		case "r":
			m.st.desc = !m.st.desc
		}
	case refreshed:
		m.st.at = msg.at
		if msg.err != nil {
			m.st.err = msg.err.Error()
		} else {
			m.st.err = ""
			if msg.cell != nil {
				m.st.setCell(msg.cell, m.last, msg.at)
			} else {
				m.st.cell, m.st.members = false, ""
				m.st.rows = snapshot(msg.res, m.st.rows, msg.at.Sub(m.last))
				m.st.cellBytes = msg.res.CellBytes
			}
			m.last = msg.at
		}
		m.st.paused = msg.paused
		return m, tea.Tick(time.Second, func(time.Time) tea.Msg { return tick{} })
	case tick:
		return m, m.refresh
	}
	return m, nil
}

// setCell makes a cell's listing, read at at (the previous at last), the
// frame's rows; the members that did not answer are named in the error line.
func (st *topState) setCell(l *cellQueues, last, at time.Time) {
	if !st.cell {
		st.rows = nil // rates against one member's listing would be wrong
	}
	st.cell = true
	st.rows = snapshotRows(l.Queues, st.rows, at.Sub(last))
	st.cellBytes = l.CellBytes
	missing := l.missing()
	st.members = fmt.Sprintf("%d/%d members", len(l.Members)-len(missing), len(l.Members))
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, m := range missing {
			names[i] = m.ID + ": " + m.Error
		}
		st.err = "not answering (queues not shown): " + strings.Join(names, "; ")
	}
}

func (m topModel) View() string {
	if m.width == 0 {
		return "" // the size is not known yet
	}
	return renderTop(m.st, m.width, m.height)
}

func topCmd(a *app) *cobra.Command {
	var once, memberOnly bool
	var width, height int
	cmd := &cobra.Command{
		Use:   "top",
		Short: "Watch the tenant's queues live: depth, bytes, drops by cause and rates, every second",
		Long: `top shows the listing of GET /api/v1/ephemeral/queues full screen, refreshed every
second: depth, bytes, partitions, groups, drops by cause, and two rates computed
between refreshes (DEPTH/S, the change of depth; DROPS/S, new drops of any cause).
Keys: ←/→ (or h/l, <, >) choose the sort column, r reverses it, q quits.
The header shows the kill switch when the credential may read it.
On a member of a cell it shows the whole cell, each queue with its OWNER, and names
in the error line any member that does not answer (--member-only: this member only).
--once prints one frame (without rates) and exits: for a terminal-less run.`,
		Example: `  queenctl top
  queenctl top --once --width 120`,
		Args: exactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := a.client()
			if err != nil {
				return err
			}
			r := newCellReader(a, c, memberOnly)
			defer r.close()
			m := topModel{c: c, r: r, ctx: cmd.Context(), st: topState{url: c.URL()}}
			if once {
				msg := m.refresh().(refreshed)
				if msg.err != nil {
					return sdk(msg.err)
				}
				next, _ := m.Update(msg)
				st := next.(topModel).st
				h := height
				if h <= 0 {
					h = len(st.rows) + 4
				}
				if _, err := fmt.Fprintln(a.stdout, strings.TrimRight(renderTop(st, width, h), "\n")); err != nil {
					return err
				}
				if msg.cell != nil {
					return warnMissing(a.stderr, msg.cell)
				}
				return nil
			}
			in, inOK := a.stdin.(*os.File)
			out, outOK := a.stdout.(*os.File)
			if !inOK || !outOK || !term.IsTerminal(int(out.Fd())) {
				return usagef("top needs a terminal; use --once for one frame")
			}
			p := tea.NewProgram(m, tea.WithAltScreen(), tea.WithContext(cmd.Context()),
				tea.WithInput(in), tea.WithOutput(out))
			_, err = p.Run()
			if err != nil && cmd.Context().Err() != nil {
				return nil // interrupted: the way top may end too
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&memberOnly, "member-only", false, "on a member of a cell, only this member's listing (no OWNER column)")
	cmd.Flags().BoolVar(&once, "once", false, "print one frame and exit (no terminal needed)")
	cmd.Flags().IntVar(&width, "width", 120, "with --once, the frame's width")
	cmd.Flags().IntVar(&height, "height", 0, "with --once, the frame's height (default: every queue)")
	return cmd
}
