package wire

import (
	"strings"
	"testing"
)

func parsePopTarget(t *testing.T, query string, def int) (PopParams, error) {
	t.Helper()
	return ParsePop(reqWithTarget(t, "/api/v1/ephemeral/pop?"+query).Query(), def)
}

func TestParsePop(t *testing.T) {
	p, err := parsePopTarget(t, "queue=inbox%2F1&partition=room-7&group=g+1&batch=50&timeout=1500&wait=true&autoAck=1&extra=ignored", 30000)
	if err != nil {
		t.Fatal(err)
	}
	if string(p.Queue) != "inbox/1" || string(p.Partition) != "room-7" || string(p.Group) != "g 1" ||
		p.Batch != 50 || p.TimeoutMs != 1500 || !p.Wait || !p.AutoAck {
		t.Errorf("%+v", p)
	}
}

func TestParsePopDefaults(t *testing.T) {
	p, err := parsePopTarget(t, "queue=q", 30000)
	if err != nil {
		t.Fatal(err)
	}
	if p.Batch != 1 || p.TimeoutMs != 30000 || p.Wait || p.AutoAck || p.Partition != nil || p.Group != nil {
		t.Errorf("%+v", p)
	}
	// Empty partition and group mean absent (D10).
	p, err = parsePopTarget(t, "queue=q&partition=&group=", 30000)
	if err != nil || len(p.Partition) != 0 || len(p.Group) != 0 {
		t.Errorf("%+v %v", p, err)
	}
	// The caller's default is clamped like a sent value.
	if p, _ := parsePopTarget(t, "queue=q", 1_000_000); p.TimeoutMs != MaxPopTimeoutMs {
		t.Errorf("%d", p.TimeoutMs)
	}
}

func TestParsePopClamps(t *testing.T) {
	for q, want := range map[string][2]int{
		"batch=10000&timeout=300000":                                  {10000, 300000},
		"batch=10001&timeout=300001":                                  {10000, 300000},
		"batch=99999999999999999999999&timeout=999999999999999999999": {10000, 300000},
		"batch=007&timeout=0":                                         {7, 0},
	} {
		p, err := parsePopTarget(t, "queue=q&"+q, 30000)
		if err != nil || p.Batch != want[0] || p.TimeoutMs != want[1] {
			t.Errorf("%s: %+v %v", q, p, err)
		}
	}
	for v, want := range map[string]bool{"true": true, "1": true, "false": false, "0": false} {
		p, err := parsePopTarget(t, "queue=q&wait="+v+"&autoAck="+v, 0)
		if err != nil || p.Wait != want || p.AutoAck != want {
			t.Errorf("%s: %+v %v", v, p, err)
		}
	}
}

func TestParsePopRefusals(t *testing.T) {
	cases := map[string]string{
		"":                                  "queue is required",
		"partition=p":                       "queue is required",
		"queue=":                            "queue is required",
		"queue=a%00b":                       "control character",
		"queue=a%C2%85":                     "control character",
		"queue=%FF":                         "not valid UTF-8",
		"queue=" + strings.Repeat("x", 513): "at most 512",
		"queue=q&partition=%01":             "partition carries a control character",
		"queue=q&group=%7F":                 "group carries a control character",
		"queue=q&batch=0":                   "batch must be a positive integer, not 0",
		"queue=q&batch=-1":                  "batch must be a positive integer",
		"queue=q&batch=1.5":                 "batch must be a positive integer",
		"queue=q&batch=":                    "batch must be a positive integer, not empty",
		"queue=q&batch":                     "not empty",
		"queue=q&batch=+5":                  "batch must be a positive integer",
		"queue=q&batch=%2B5":                "batch must be a positive integer",
		"queue=q&batch=1e3":                 "batch must be a positive integer",
		"queue=q&timeout=-5":                "timeout must be a non-negative integer",
		"queue=q&timeout=abc":               "timeout must be a non-negative integer",
		"queue=q&wait=yes":                  "wait must be true, false, 1 or 0",
		"queue=q&wait=TRUE":                 "wait must be true, false, 1 or 0",
		"queue=q&wait=":                     "wait must be true, false, 1 or 0",
		"queue=q&autoAck=2":                 "autoAck must be true, false, 1 or 0",
		"queue=q&queue=r":                   "queue appears twice",
		"queue=q&batch=1&batch=2":           "batch appears twice",
		"queue=q&%62atch=1&batch=2":         "batch appears twice",
	}
	for q, frag := range cases {
		_, err := parsePopTarget(t, q, 30000)
		if e := wantErr(t, err, 400, frag); e.Close || e.Code != CodeBadRequest {
			t.Errorf("%s: close %v code %s", q, e.Close, e.Code)
		}
	}
}
