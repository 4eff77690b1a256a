package relay

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"time"
)

// The handshake, before any frame (both ends prove the cell secret; the
// server speaks first so that a client learns nothing it did not ask for):
//
//	S → C  magic(4) version(1) server nonce(32)
//	C → S  magic(4) version(1) client nonce(32) HMAC(secret, "c"|sn|cn)(32)
//	S → C  status(1): 0 then HMAC(secret, "s"|cn|sn)(32); 1 = refused, closed
//
// The MACs are compared with hmac.Equal (constant time). Fresh nonces on
// both sides make a recorded handshake useless to replay. The secret
// authenticates the connection's two ends; it neither encrypts nor signs
// the frames that follow (the cell runs on a network its members trust).
const (
	magic      = "QRLY"
	version    = 1
	nonceLen   = 32
	macLen     = sha256.Size
	helloLen   = 4 + 1 + nonceLen
	replyLen   = helloLen + macLen
	statusOK   = 0
	statusDeny = 1
)

var errHandshake = errors.New("relay: bad handshake")

func mac(secret []byte, label byte, a, b []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte{label})
	m.Write(a)
	m.Write(b)
	return m.Sum(nil)
}

func hello(nonce []byte) []byte {
	b := make([]byte, 0, replyLen)
	b = append(b, magic...)
	b = append(b, version)
	return append(b, nonce...)
}

func readHello(r io.Reader, n int) ([]byte, error) {
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return nil, err
	}
	if string(b[:4]) != magic || b[4] != version {
		return nil, errHandshake
	}
	return b[5:], nil
}

// serverHandshake authenticates the peer on c; after an error the caller
// closes c without reading a frame from it.
func serverHandshake(c net.Conn, secret []byte, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	sn := make([]byte, nonceLen)
	rand.Read(sn)
	if _, err := c.Write(hello(sn)); err != nil {
		return err
	}
	rest, err := readHello(c, replyLen)
	if err != nil {
		return err
	}
	cn, got := rest[:nonceLen], rest[nonceLen:]
	if !hmac.Equal(got, mac(secret, 'c', sn, cn)) {
		c.Write([]byte{statusDeny})
		return ErrAuth
	}
	_, err = c.Write(append([]byte{statusOK}, mac(secret, 's', cn, sn)...))
	return err
}

// clientHandshake proves the secret to the server on c and checks the
// server's proof.
func clientHandshake(c net.Conn, secret []byte, timeout time.Duration) error {
	c.SetDeadline(time.Now().Add(timeout))
	defer c.SetDeadline(time.Time{})
	sn, err := readHello(c, helloLen)
	if err != nil {
		return err
	}
	cn := make([]byte, nonceLen)
	rand.Read(cn)
	if _, err := c.Write(append(hello(cn), mac(secret, 'c', sn, cn)...)); err != nil {
		return err
	}
	st := make([]byte, 1+macLen)
	if _, err := io.ReadFull(c, st[:1]); err != nil {
		return err
	}
	if st[0] != statusOK {
		return ErrAuth
	}
	if _, err := io.ReadFull(c, st[1:]); err != nil {
		return err
	}
	if !hmac.Equal(st[1:], mac(secret, 's', cn, sn)) {
		return ErrAuth
	}
	return nil
}
