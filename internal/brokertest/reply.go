package brokertest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Reply is one HTTP answer, read whole. A suite that wants assertions of
// its own declares `type reply brokertest.Reply` and converts.
type Reply struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r Reply) String() string {
	return fmt.Sprintf("%d %s", r.Status, strings.TrimSpace(string(r.Body)))
}

// Code is the refusal's code field ({"error": ..., "code": ...}); "" when
// the body has none.
func (r Reply) Code() string {
	var e struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Code
}

// Do sends req with c and reads the answer whole; the error is the
// transport's (a refusal is a Reply).
func Do(c *http.Client, req *http.Request) (Reply, error) {
	resp, err := c.Do(req)
	if err != nil {
		return Reply{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return Reply{}, err
	}
	return Reply{Status: resp.StatusCode, Header: resp.Header, Body: body}, nil
}
