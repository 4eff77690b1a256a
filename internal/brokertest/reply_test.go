package brokertest

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// Do reads the answer whole, a refusal included, and Code reads its code.
func TestDoReadsTheAnswer(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(429)
		_, _ = w.Write([]byte(`{"error":"slow down","code":"rate_limited"}` + "\n"))
	}))
	defer srv.Close()
	req, err := http.NewRequest("GET", srv.URL+"/x", nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := Do(srv.Client(), req)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != 429 || r.Header.Get("Retry-After") != "1" || r.Code() != "rate_limited" {
		t.Fatalf("got %s (Retry-After %q, code %q), want 429 rate_limited with Retry-After 1", r, r.Header.Get("Retry-After"), r.Code())
	}
	if got := r.String(); got != `429 {"error":"slow down","code":"rate_limited"}` {
		t.Fatalf("String() = %q", got)
	}
	if (Reply{Status: 200, Body: []byte(`[]`)}).Code() != "" {
		t.Fatal("a body without a code has a code")
	}
}
