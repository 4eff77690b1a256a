package cell

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/queenmq/ephemeral/store/storetest"
)

// QUEEN_CELL_PUBLIC_URL: what is accepted (and how it is written down),
// and every refusal, with the variable named and what to give instead.
func TestPublicURLFromEnv(t *testing.T) {
	base := map[string]string{"QUEEN_DATABASE_URL": "postgres://db/q", EnvAdvertise: "10.0.0.1:7000", EnvSecret: secret}
	for _, tc := range []struct{ in, want, refused string }{
		{"", "", ""},
		{"http://10.0.0.1:6632", "http://10.0.0.1:6632", ""},
		{"https://broker-a.example.com", "https://broker-a.example.com", ""},
		{"  http://broker-a:80/ ", "http://broker-a:80", ""},
		{"http://[fd00::1]:6632", "http://[fd00::1]:6632", ""},
		{"ftp://10.0.0.1:6632", "", "must start with http:// or https://"},
		{"10.0.0.1:6632", "", "must start with http:// or https://"},
		{"http://", "", "names no host"},
		{"http://:6632", "", "names no host"},
		{"http://0.0.0.0:6632", "", "unspecified address"},
		{"http://[::]:6632", "", "unspecified address"},
		{"http://10.0.0.1:6632/queen", "", "no path, query or fragment"},
		{"http://10.0.0.1:6632?x=1", "", "no path, query or fragment"},
		{"http://10.0.0.1:6632#f", "", "no path, query or fragment"},
		{"http://u:p@10.0.0.1:6632", "", "credentials"},
		{"http://10.0.0.1:1", "http://10.0.0.1:1", ""},
		{"http://10.0.0.1:65535", "http://10.0.0.1:65535", ""},
		{"http://10.0.0.1:65536", "", "bad port"},
		{"http://10.0.0.1:70000", "", "bad port"},
		{"http://10.0.0.1:0", "", "bad port"},
		{"http://10.0.0.1 :6632", "", "white space"},
	} {
		e := map[string]string{EnvPublicURL: tc.in}
		for k, v := range base {
			e[k] = v
		}
		c, err := FromEnv(env(e))
		switch {
		case tc.refused == "" && err != nil:
			t.Errorf("%q: %v", tc.in, err)
		case tc.refused == "" && c.PublicURL != tc.want:
			t.Errorf("%q: PublicURL %q, want %q", tc.in, c.PublicURL, tc.want)
		case tc.refused != "" && (err == nil || !strings.Contains(err.Error(), tc.refused) || !strings.Contains(err.Error(), EnvPublicURL+"=")):
			t.Errorf("%q: error %v, want one naming %s and saying %q", tc.in, err, EnvPublicURL, tc.refused)
		}
	}
	// Like every QUEEN_CELL_* variable, refused without an advertised address.
	_, err := FromEnv(env(map[string]string{EnvPublicURL: "http://10.0.0.1:6632"}))
	if err == nil || !strings.Contains(err.Error(), EnvPublicURL+" is set without "+EnvAdvertise) {
		t.Fatalf("without %s: %v", EnvAdvertise, err)
	}
}

func TestDerivePublicURL(t *testing.T) {
	for _, tc := range []struct{ host, port, want string }{
		{"10.0.0.1", "6632", "http://10.0.0.1:6632"},
		{"broker-a.internal", "8080", "http://broker-a.internal:8080"},
		{"127.0.0.1", "6632", "http://127.0.0.1:6632"},
		{"::1", "6632", "http://[::1]:6632"},
		{"[fd00::1]", "6632", "http://[fd00::1]:6632"},
		{"", "6632", ""},
		{"0.0.0.0", "6632", ""},
		{"::", "6632", ""},
		{"[::]", "6632", ""},
		{"10.0.0.1", "", ""},
		{"10.0.0.1", "99999", ""},
		{"bad host", "6632", ""},
	} {
		if got := DerivePublicURL(tc.host, tc.port); got != tc.want {
			t.Errorf("DerivePublicURL(%q, %q) = %q, want %q", tc.host, tc.port, got, tc.want)
		}
	}
}

// Every member's view carries every member's public URL (and "" for one
// without), and so does the admin listing.
func TestViewsCarryPublicURLs(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	url := func(u string) func(*Options) { return func(o *Options) { o.PublicURL = u } }
	a := start(t, schema, "a:1", hb, to, url("http://a:6632"))
	b := start(t, schema, "b:1", hb, to, url("https://b.example.com"))
	c := start(t, schema, "c:1", hb, to)
	waitFor(t, 5*time.Second, "three members", viewIs("a:1,b:1,c:1", a, b, c))
	want := "a:1=http://a:6632,b:1=https://b.example.com,c:1="
	for _, m := range []*Membership{a, b, c} {
		if got := urls(m.View()); got != want {
			t.Fatalf("%s's view: %s, want %s", m.self, got, want)
		}
	}
	rows, err := c.Rows(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range rows {
		got = append(got, r.ID+"="+r.PublicURL)
	}
	if strings.Join(got, ",") != want {
		t.Fatalf("rows %s, want %s", strings.Join(got, ","), want)
	}
}

func urls(v *View) string {
	var s []string
	for _, m := range v.Members {
		s = append(s, m.ID+"="+m.URL)
	}
	return strings.Join(s, ",")
}

// A rolling upgrade: the table as the release before public URLs made it
// (no public_url column), with a member of that release heartbeating in it
// by that release's own statements. A member of this release adds the
// column in place and publishes its URL; the old member's statements keep
// working beside it, and its row reads as publishing none.
func TestPublicURLColumnAddedInPlace(t *testing.T) {
	storetest.NeedPostgres(t, pgServer)
	schema := pgServer.FreshSchema(t)
	ctx := context.Background()
	tbl := schema + ".cell_members"
	if err := pgServer.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS `+schema); err != nil {
		t.Fatal(err)
	}
	// The previous release's table and statements, verbatim.
	if err := pgServer.Exec(ctx, `CREATE TABLE `+tbl+` (
			member       text COLLATE "C" PRIMARY KEY,
			incarnation  text NOT NULL,
			joined_at    timestamptz NOT NULL DEFAULT now(),
			heartbeat_at timestamptz NOT NULL DEFAULT now(),
			expires_at   timestamptz NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	oldBeat := `INSERT INTO ` + tbl + ` AS m (member, incarnation, expires_at)
			VALUES ('old:1', 'old-inc', now() + 60000 * interval '1 millisecond')
			ON CONFLICT (member) DO UPDATE SET
				joined_at = CASE WHEN m.incarnation = EXCLUDED.incarnation AND m.expires_at > now()
					THEN m.joined_at ELSE now() END,
				incarnation = EXCLUDED.incarnation,
				heartbeat_at = now(),
				expires_at = EXCLUDED.expires_at
			WHERE false OR m.incarnation = EXCLUDED.incarnation OR m.expires_at <= now()`
	oldLive := `SELECT member, incarnation FROM ` + tbl + ` WHERE expires_at > now() ORDER BY member`
	if err := pgServer.Exec(ctx, oldBeat); err != nil {
		t.Fatal(err)
	}
	aLogs, bLogs := new(syncLog), new(syncLog)
	a := start(t, schema, "a:1", hb, to, func(o *Options) {
		o.PublicURL = "http://a:6632"
		o.Logger = slog.New(slog.NewTextHandler(aLogs, nil))
	})
	waitFor(t, 5*time.Second, "a beside the old member", viewIs("a:1,old:1", a))
	const added = "cell: added the public_url column"
	if n := aLogs.count(added); n != 1 {
		t.Fatalf("the member that migrated the table logged it %d times, want once", n)
	}
	if got := urls(a.View()); got != "a:1=http://a:6632,old:1=" {
		t.Fatalf("a's view: %s", got)
	}
	// The old release's statements still run on the migrated table.
	if err := pgServer.Exec(ctx, oldBeat); err != nil {
		t.Fatalf("the old release's heartbeat on the migrated table: %v", err)
	}
	if err := pgServer.Exec(ctx, oldLive); err != nil {
		t.Fatalf("the old release's live-set query on the migrated table: %v", err)
	}
	// A second member of this release finds the column there.
	b := start(t, schema, "b:1", hb, to, func(o *Options) { o.Logger = slog.New(slog.NewTextHandler(bLogs, nil)) })
	waitFor(t, 5*time.Second, "three members", viewIs("a:1,b:1,old:1", a, b))
	if n := bLogs.count(added); n != 0 {
		t.Fatalf("a member that found the column logged adding it %d times", n)
	}
	if got := urls(b.View()); got != "a:1=http://a:6632,b:1=,old:1=" {
		t.Fatalf("b's view: %s", got)
	}
}
