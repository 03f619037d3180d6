// Command waitercost measures what /shutdown callers waiting for a drain cost `shutdown-manager serve`:
// its resident memory (VmRSS, and the peak VmHWM) with N callers waiting, and what a caller over
// --max-waiters costs (it is answered 429 at once).
//
// A real Envoy (testbed.FindBinaries) has a TCP connection held open, so the drain cannot release; for
// each N a fresh `serve` gets N concurrent GET /shutdown, each on its own connection, and is measured once
// its shutdown_manager_shutdown_waiters gauge says N. Run it as
//
//	go build -o /tmp/sm ./cmd/shutdown-manager && go run ./bench/waitercost -manager /tmp/sm -n 0,128,1000,5000
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/envoy-shutdown-manager/shutdown-manager/internal/testbed"
)

func main() {
	manager := flag.String("manager", "bin/shutdown-manager", "the shutdown-manager binary")
	counts := flag.String("n", "0,128,1000,5000", "numbers of waiting callers to measure, comma-separated")
	over := flag.Int("over", 5000, "callers sent beyond the default --max-waiters in the last row (0: none)")
	flag.Parse()
	if err := run(*manager, *counts, *over); err != nil {
		fmt.Fprintln(os.Stderr, "waitercost:", err)
		os.Exit(1)
	}
}

func run(manager, counts string, over int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	bins, err := testbed.FindBinaries()
	if err != nil {
		return err
	}
	up, err := testbed.StartUpstream()
	if err != nil {
		return err
	}
	defer up.Close()
	dir, err := os.MkdirTemp("", "wc")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e, err := testbed.Start(ctx, bins[0], up, testbed.Options{Dir: dir})
	if err != nil {
		return err
	}
	defer e.Stop()
	hold := testbed.TCPHold(ctx, e.TCPAddr, 9*time.Minute) // the drain never releases while it is open
	defer hold.Stop()

	fmt.Printf("envoy %s; manager %s\n\n", bins[0].Version, manager)
	fmt.Println("| waiting callers | refused (429) | VmRSS | VmHWM | per waiter (RSS over 0 waiters) |")
	fmt.Println("|---:|---:|---:|---:|---:|")
	var base int
	for _, f := range strings.Split(counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return fmt.Errorf("-n: %w", err)
		}
		m, err := measure(ctx, manager, e.AdminURL, n, n, 0)
		if err != nil {
			return fmt.Errorf("%d waiters: %w", n, err)
		}
		if n == 0 {
			base = m.rss
		}
		per := "-"
		if n > 0 && base > 0 {
			per = fmt.Sprintf("%.1f kB", float64(m.rss-base)/float64(n))
		}
		fmt.Printf("| %d | 0 | %s | %s | %s |\n", n, mb(m.rss), mb(m.hwm), per)
	}
	if over > 0 {
		const limit = 128 // the default --max-waiters
		m, err := measure(ctx, manager, e.AdminURL, limit+over, limit, limit)
		if err != nil {
			return fmt.Errorf("over the cap: %w", err)
		}
		fmt.Printf("| %d of %d callers (default --max-waiters %d) | %d | %s | %s | - |\n", limit, limit+over, limit, m.refused, mb(m.rss), mb(m.hwm))
	}
	return nil
}

type measurement struct{ rss, hwm, refused int } // kB, kB, callers

// measure starts serve with --max-waiters (0: the default), sends callers concurrent /shutdown, waits
// until want of them wait, and reads the process's memory.
func measure(ctx context.Context, manager, adminURL string, callers, want, maxWaiters int) (measurement, error) {
	args := []string{"serve", "--listen", "127.0.0.1:0", "--admin-address", adminURL, "--drain-timeout", "8m",
		"--min-drain-duration", "0s", "--quiet-period", "0s", "--check-interval", "1s"}
	if maxWaiters == 0 {
		args = append(args, "--max-waiters", strconv.Itoa(max(callers, 1)), "--max-connections", strconv.Itoa(callers+64))
	}
	cmd := exec.Command(manager, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return measurement{}, err
	}
	if err := cmd.Start(); err != nil {
		return measurement{}, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	addr, err := listenAddr(stderr)
	if err != nil {
		return measurement{}, err
	}
	base := "http://" + addr
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	var mu sync.Mutex
	var m measurement
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stop()
	for range callers {
		wg.Go(func() {
			t := &http.Transport{DisableKeepAlives: true}
			defer t.CloseIdleConnections()
			req, _ := http.NewRequestWithContext(rctx, http.MethodGet, base+"/shutdown", nil)
			resp, err := (&http.Client{Transport: t}).Do(req)
			if err != nil {
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusTooManyRequests {
				mu.Lock()
				m.refused++
				mu.Unlock()
			}
		})
	}
	// Wait until the gauge says want callers wait, and every refused caller has had its answer.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		g, err := waiters(ctx, base)
		mu.Lock()
		refused := m.refused
		mu.Unlock()
		if err == nil && g == want && refused == callers-want {
			break
		}
		if time.Now().After(deadline) {
			return measurement{}, fmt.Errorf("waiters %d (want %d), refused %d: %v", g, want, refused, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a gauge of another process
	}
	m.rss, m.hwm, err = memory(cmd.Process.Pid)
	return m, err
}

// listenAddr reads serve's log until its "serving" line and returns the bound address.
func listenAddr(r io.Reader) (string, error) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, `"listen":"`); i >= 0 && strings.Contains(line, `"msg":"serving"`) {
			rest := line[i+len(`"listen":"`):]
			go io.Copy(io.Discard, r)
			return rest[:strings.IndexByte(rest, '"')], nil
		}
	}
	return "", fmt.Errorf("serve exited before serving")
}

func waiters(ctx context.Context, base string) (int, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "shutdown_manager_shutdown_waiters "); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no waiters gauge")
}

// memory reads VmRSS and VmHWM (kB) of pid.
func memory(pid int) (rss, hwm int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		v, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "VmRSS:":
			rss = v
		case "VmHWM:":
			hwm = v
		}
	}
	return rss, hwm, nil
}

func mb(kb int) string { return fmt.Sprintf("%.1f MB", float64(kb)/1024) }
