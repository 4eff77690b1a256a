package bench

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Reading a target's process through /proc (Linux): resident memory, CPU
// time, its open-file limit, and finding it by the port it listens on.

// rss is the process's VmRSS in bytes.
func rss(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// cpuSeconds is the user+system CPU time of pid so far, and the system
// part of it.
func cpuSeconds(pid int) (total, sys float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, err
	}
	// The command name (field 2) may hold spaces; fields count from after ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseInt(f[11], 10, 64)
	st, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("bad /proc/%d/stat", pid)
	}
	return float64(ut+st) / clockTicks, float64(st) / clockTicks, nil
}

// readWriteSyscalls is how many read- and write-family system calls pid
// has made (syscr + syscw of /proc/PID/io: read, write, readv, writev and
// the like, not epoll or futex). Reading another user's process needs
// root.
func readWriteSyscalls(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/io", pid))
	if err != nil {
		return 0, err
	}
	var n int64
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		for _, key := range []string{"syscr:", "syscw:"} {
			if v, ok := strings.CutPrefix(line, key); ok {
				c, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
				if err != nil {
					return 0, fmt.Errorf("bad %s in /proc/%d/io", key, pid)
				}
				n += c
				found++
			}
		}
	}
	if found != 2 {
		return 0, fmt.Errorf("no syscr/syscw in /proc/%d/io", pid)
	}
	return n, nil
}

// selfCPUSeconds is this process's user+system CPU time so far.
func selfCPUSeconds() float64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// openFileRoom is how many more files pid may open: its soft limit minus
// what it has open.
func openFileRoom(pid int) (int, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/limits", pid))
	if err != nil {
		return 0, err
	}
	limit := -1
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Max open files"); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				limit, err = strconv.Atoi(f[0])
				if err != nil {
					return 0, fmt.Errorf("open-file limit %q in /proc/%d/limits", f[0], pid)
				}
			}
		}
	}
	if limit < 0 {
		return 0, fmt.Errorf("no open-file limit in /proc/%d/limits", pid)
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return 0, err
	}
	return limit - len(fds), nil
}

// pidByAddr finds the process listening on addr's TCP port, by the socket
// inode in /proc/net/tcp{,6} and the descriptors under /proc/*/fd.
func pidByAddr(addr string) (int, error) {
	_, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	port, err := strconv.Atoi(portStr)
	if err != nil {
		return 0, err
	}
	inodes := map[string]bool{}
	for _, tab := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(tab)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			f := strings.Fields(line)
			if len(f) < 10 || f[3] != "0A" { // 0A: LISTEN
				continue
			}
			_, hexPort, _ := strings.Cut(f[1], ":")
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
				inodes["socket:["+f[9]+"]"] = true
			}
		}
	}
	if len(inodes) == 0 {
		return 0, fmt.Errorf("nothing listens on port %d", port)
	}
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range procs {
		pid, err := strconv.Atoi(filepath.Base(dir))
		if err != nil || pid == os.Getpid() {
			continue
		}
		fds, err := os.ReadDir(dir + "/fd")
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if link, err := os.Readlink(dir + "/fd/" + fd.Name()); err == nil && inodes[link] {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no readable process owns the listener on port %d", port)
}
