// Command queenprobe runs the transport probes (abusive clients) against a broker
// on this machine and reports the broker's resident memory (BENCHMARKS.md,
// transport under abuse):
//
//	-mode bodies:   n connections each send a body of -size bytes at -rate
//	                bytes/s and read the answer
//	-mode pipeline: one connection pipelines n queue listings and reads none;
//	                /health is timed meanwhile on other connections
//	-mode accept:   new connections per second, each GET /health then close
//	-mode fill:     push one message to each of n queues with 70-byte names
//	                (3,000 make a listing of about 1 MB)
package main

import (
	"bufio"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func rss(pid int) int {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			n, _ := strconv.Atoi(f[1])
			return n / 1024
		}
	}
	return -1
}

func main() {
	addr := flag.String("addr", "127.0.0.1:16660", "")
	pid := flag.Int("pid", 0, "")
	mode := flag.String("mode", "bodies", "bodies|pipeline|accept|fill")
	dialers := flag.Int("c", 8, "accept: concurrent dialers")
	dur := flag.Duration("d", 5*time.Second, "accept: how long")
	n := flag.Int("n", 20, "connections (bodies) or requests (pipeline)")
	size := flag.Int("size", 10<<20, "body bytes")
	rate := flag.Int("rate", 0, "bytes/s per connection (0 = full speed)")
	flag.Parse()
	switch *mode {
	case "accept":
		acceptRate(*addr, *dialers, *dur)
		return
	case "fill":
		fill(*addr, *n)
		return
	}
	if *pid == 0 {
		fmt.Fprintln(os.Stderr, "queenprobe: -pid (the broker's) is needed for its memory")
		os.Exit(2)
	}
	peak := 0
	stop := make(chan struct{})
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
				peak = max(peak, rss(*pid))
			}
		}
	}()
	start := time.Now()
	switch *mode {
	case "bodies":
		var wg sync.WaitGroup
		codes := make([]string, *n)
		for i := 0; i < *n; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				c, err := net.Dial("tcp", *addr)
				if err != nil {
					codes[i] = "dial"
					return
				}
				defer c.Close()
				fmt.Fprintf(c, "POST /api/v1/ephemeral/push HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n", *size)
				piece := make([]byte, 64<<10)
				for j := range piece {
					piece[j] = 'x'
				}
				t0 := time.Now()
				for sent := 0; sent < *size; {
					k := min(len(piece), *size-sent)
					if _, err := c.Write(piece[:k]); err != nil {
						break
					}
					sent += k
					if *rate > 0 {
						time.Sleep(time.Until(t0.Add(time.Duration(float64(sent) / float64(*rate) * 1e9))))
					}
				}
				c.SetReadDeadline(time.Now().Add(60 * time.Second))
				resp, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					codes[i] = "err"
					return
				}
				codes[i] = strconv.Itoa(resp.StatusCode)
			}(i)
		}
		wg.Wait()
		cnt := map[string]int{}
		for _, c := range codes {
			cnt[c]++
		}
		fmt.Printf("bodies: %d x %d MiB: %v in %.2fs\n", *n, *size>>20, cnt, time.Since(start).Seconds())
	case "pipeline":
		c, _ := net.Dial("tcp", *addr)
		c.Write([]byte(strings.Repeat("GET /api/v1/ephemeral/queues HTTP/1.1\r\nHost: x\r\n\r\n", *n)))
		time.Sleep(500 * time.Millisecond)
		var worst time.Duration
		for i := 0; i < 20; i++ {
			t0 := time.Now()
			resp, err := http.Get("http://" + *addr + "/health")
			if err == nil {
				resp.Body.Close()
			}
			worst = max(worst, time.Since(t0))
			time.Sleep(100 * time.Millisecond)
		}
		fmt.Printf("pipeline: %d listings unread; /health worst of 20: %v\n", *n, worst)
		defer c.Close()
	}
	time.Sleep(300 * time.Millisecond)
	close(stop)
	fmt.Printf("broker RSS: peak %d MiB, now %d MiB\n", peak, rss(*pid))
	time.Sleep(3 * time.Second)
	fmt.Printf("broker RSS 3 s later: %d MiB\n", rss(*pid))
}

// acceptRate opens connections from c dialers for d, each asking GET
// /health and closing, and prints how many were served per second.
func acceptRate(addr string, c int, d time.Duration) {
	var n, fails atomic.Int64
	stop := time.Now().Add(d)
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				conn, err := net.Dial("tcp", addr)
				if err != nil {
					fails.Add(1)
					continue
				}
				conn.Write([]byte("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"))
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err != nil || resp.StatusCode != 200 {
					fails.Add(1)
				} else {
					n.Add(1)
				}
				conn.Close()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("connections/s %.0f  (served %d, failed %d, %d dialers, %v)\n", float64(n.Load())/d.Seconds(), n.Load(), fails.Load(), c, d)
}

// fill pushes one message to each of n queues.
func fill(addr string, n int) {
	for i := range n {
		body := fmt.Sprintf(`{"queue":"queue-%05d-%s","messages":[{"payload":"x"}]}`, i, strings.Repeat("n", 60))
		resp, err := http.Post("http://"+addr+"/api/v1/ephemeral/push", "application/json", strings.NewReader(body))
		if err != nil {
			fmt.Fprintln(os.Stderr, "queenprobe:", err)
			os.Exit(1)
		}
		resp.Body.Close()
		if resp.StatusCode != 201 {
			fmt.Fprintln(os.Stderr, "queenprobe: push answered", resp.StatusCode)
			os.Exit(1)
		}
	}
}
