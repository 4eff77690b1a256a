// Package fixture is what TestCheckerFindsWhatItShould runs the check on:
// every line marked "want" must be reported, and no other.
package fixture

import (
	"bytes"
	"crypto/hmac"
	"crypto/subtle"
	"reflect"
	"strings"
)

const macLen = 32

type peer struct {
	gwSecret []byte
	Token    string
	wantMAC  []byte
}

func (p *peer) Signature() []byte { return nil }

func mac(secret []byte, label byte, a, b []byte) []byte { return nil }

func flagged(p, q *peer, got, sn, cn []byte, tok string, st []byte) {
	_ = string(got) != string(mac(p.gwSecret, 'c', sn, cn)) // want
	_ = p.Token == tok                                      // want
	_ = tok != p.Token                                      // want
	_ = bytes.Equal(p.gwSecret, got)                        // want
	_ = bytes.Equal(st[1:], p.wantMAC)                      // want
	_ = strings.EqualFold(tok, q.Token)                     // want
	_ = strings.HasPrefix(tok, p.Token)                     // want
	_ = reflect.DeepEqual(p.Signature(), got)               // want
	_ = bytes.Compare(p.wantMAC[:8], got[:8]) == 0          // want
	_ = (*p).Token == (*q).Token                            // want
	var proofDigest, hmacSum []byte
	_ = string(proofDigest) == string(hmacSum) // want
	var session_token string
	_ = session_token == tok // want
}

func allowed(p *peer, got, sn, cn []byte, tok string, st []byte) {
	_ = hmac.Equal(got, mac(p.gwSecret, 'c', sn, cn))
	_ = subtle.ConstantTimeCompare(got, p.gwSecret) == 1
	_ = subtle.ConstantTimeCompare([]byte(tok), []byte(p.Token)) != 1
	_ = p.Token == ""
	_ = p.gwSecret == nil
	_ = len(p.gwSecret) == macLen
	_ = len(got) != len(p.wantMAC)
	_ = tok == "Bearer"
	_ = strings.HasPrefix(p.Token, "qk_")
	_ = string(st[:4]) != "QRLY"
	_ = st[0] != macLen
	var tokenLen, macSize int
	_ = tokenLen == macSize
	var machine, tokenizer string // words, not substrings: neither is a secret
	_ = machine == tokenizer
}
