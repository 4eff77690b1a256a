// Command viewrss measures what a waiting view read of the cell (GET
// /api/v1/ephemeral/cell?after=0, docs/routes.md "cell") costs the broker
// in RSS, beside a parked pop and an idle keep-alive connection: it starts
// the broker binary given (a single broker on the embedded store, one
// event loop, 127.0.0.1), opens n connections that each send one request,
// and prints the RSS per connection over the broker's idle RSS, for each
// kind, rounds times.
//
//	go build -o /tmp/queen ./cmd/queen && (ulimit -n 20000; cd bench && go run ./cmd/viewrss -bin /tmp/queen)
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	bin := flag.String("bin", "", "the broker binary (go build ./cmd/queen)")
	n := flag.Int("n", 3000, "connections per kind")
	rounds := flag.Int("rounds", 2, "rounds of the three kinds")
	port := flag.Int("port", 17100, "the first port (each run takes the next)")
	flag.Parse()
	if *bin == "" {
		fmt.Fprintln(os.Stderr, "viewrss: -bin is required")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "viewrss")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	for r := range *rounds {
		for i, target := range []string{
			"/api/v1/ephemeral/cell?after=0&timeout=300000",
			"/api/v1/ephemeral/pop?queue=q{i}&wait=true&timeout=300000",
			"/health",
		} {
			p := *port + r*3 + i
			run(*bin, filepath.Join(dir, fmt.Sprint(p)), p, target, *n)
		}
	}
}

// rss reads the process's VmRSS.
func rss(pid int) int64 {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			fmt.Sscanf(strings.TrimSpace(v), "%d", &kb)
			return kb << 10
		}
	}
	return 0
}

func run(bin, data string, port int, target string, n int) {
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "HOST=127.0.0.1", fmt.Sprint("PORT=", port), "QUEEN_DATA_DIR="+data, "QUEEN_LOG_LEVEL=warn", "QUEEN_EVENT_LOOPS=1")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			panic("the broker did not listen")
		}
	}
	time.Sleep(time.Second) // its idle RSS settles
	before := rss(cmd.Process.Pid)
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		var c net.Conn
		var err error
		for range 50 { // the listen backlog may be full for a moment
			if c, err = net.Dial("tcp", addr); err == nil {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", strings.ReplaceAll(target, "{i}", fmt.Sprint(i)))
		conns = append(conns, c)
	}
	time.Sleep(3 * time.Second) // every request served (parked or answered)
	after := rss(cmd.Process.Pid)
	fmt.Printf("%-60s n=%d  RSS %.1f -> %.1f MiB  %.0f B per connection\n", target, n, float64(before)/(1<<20), float64(after)/(1<<20), float64(after-before)/float64(n))
}
