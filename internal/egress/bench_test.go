//go:build linux

package egress

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchPolicy allows the web host by address and by name.
func benchPolicy() *testPolicy {
	return &testPolicy{names: []string{"web.test"}, prefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.11/32")}}
}

func directDial(network, addr string) (net.Conn, error) {
	return net.DialTimeout(network, addr, 3*time.Second)
}

// BenchmarkEgressThroughput sends bulk data to a sink on a test host:
// through the engine from a session namespace, and directly from the
// engine's own namespace over the same veth.
func BenchmarkEgressThroughput(b *testing.B) {
	for _, mode := range []string{"direct", "engine"} {
		b.Run(mode, func(b *testing.B) {
			needWorld(b)
			dial := directDial
			if mode == "engine" {
				dial = newNSDialer(b, newSession(b, benchPolicy(), nil).ns).dial
			}
			c, err := dial("tcp", hostPort(hostWeb4, 7100))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			chunk := make([]byte, 1<<20)
			b.SetBytes(int64(len(chunk)))
			b.ResetTimer()
			cpu0 := processCPU(b)
			for range b.N {
				if _, err := c.Write(chunk); err != nil {
					b.Fatal(err)
				}
			}
			c.(interface{ CloseWrite() error }).CloseWrite()
			line, err := bufio.NewReader(c).ReadString('\n')
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			// The writer, the engine and the sink are all this process, so
			// its CPU time per byte is the path's cost, which other load on
			// the machine changes far less than it changes the rate.
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/MiB")
			if n, _ := strconv.ParseInt(strings.TrimSpace(line), 10, 64); n != int64(b.N)*int64(len(chunk)) {
				b.Fatalf("sink got %d bytes, want %d", n, int64(b.N)*int64(len(chunk)))
			}
		})
	}
}

// BenchmarkEgressDownload reads bulk data from a source on a test host, the
// direction of a clone or a package download: through the engine from a
// session namespace, and directly.
func BenchmarkEgressDownload(b *testing.B) {
	for _, mode := range []string{"direct", "engine"} {
		b.Run(mode, func(b *testing.B) {
			needWorld(b)
			dial := directDial
			if mode == "engine" {
				dial = newNSDialer(b, newSession(b, benchPolicy(), nil).ns).dial
			}
			c, err := dial("tcp", hostPort(hostWeb4, 7200))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 1<<20)
			b.SetBytes(int64(len(buf)))
			b.ResetTimer()
			cpu0 := processCPU(b)
			for range b.N {
				if _, err := io.ReadFull(c, buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/MiB")
		})
	}
}

// processCPU is the user and system CPU time this process has used.
func processCPU(b *testing.B) time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkEgressConnect measures a connection's setup and first round
// trip: an echo by address (the engine dials before it answers the SYN) and
// an HTTP request by name (the engine reads the Host header and checks the
// name's addresses first). Both dial from a thread that stays in its
// namespace.
func BenchmarkEgressConnect(b *testing.B) {
	for _, kind := range []string{"echo", "http"} {
		for _, mode := range []string{"direct", "engine"} {
			b.Run(kind+"/"+mode, func(b *testing.B) {
				needWorld(b)
				dial := directDial
				if mode == "engine" {
					// The HTTP request is allowed by its Host only, so
					// the engine reads it and checks the name's addresses.
					p := benchPolicy()
					if kind == "http" {
						p = &testPolicy{names: []string{"web.test"}}
					}
					dial = newNSDialer(b, newSession(b, p, nil).ns).dial
				}
				port := 7000
				if kind == "http" {
					port = 80
				}
				req := []byte("GET / HTTP/1.1\r\nHost: web.test\r\nConnection: close\r\n\r\n")
				lat := make([]time.Duration, 0, b.N)
				buf := make([]byte, 4096)
				b.ResetTimer()
				for range b.N {
					start := time.Now()
					c, err := dial("tcp", hostPort(hostWeb4, port))
					if err != nil {
						b.Fatal(err)
					}
					if kind == "echo" {
						c.Write([]byte{1})
						_, err = io.ReadFull(c, buf[:1])
					} else {
						c.Write(req)
						_, err = c.Read(buf)
					}
					lat = append(lat, time.Since(start))
					c.Close()
					if err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				slices.Sort(lat)
				b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			})
		}
	}
}

// BenchmarkEgressMemory measures the Go heap and stacks a namespace with a
// serving engine holds when idle and after one connection.
func BenchmarkEgressMemory(b *testing.B) {
	needWorld(b)
	ctx := context.Background()
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	type pair struct {
		ns  *Namespace
		eng *Engine
	}
	var all []pair
	b.ResetTimer()
	for range b.N {
		ns, err := NewNamespace(ctx)
		if err != nil {
			b.Fatal(err)
		}
		eng, err := Serve(ctx, ns, Config{Policy: benchPolicy(), Resolver: theWorld.resolver})
		if err != nil {
			b.Fatal(err)
		}
		all = append(all, pair{ns, eng})
		s := &session{ns: ns, eng: eng}
		c, err := s.dial("tcp", hostPort(hostWeb4, 7000))
		if err != nil {
			b.Fatal(err)
		}
		c.Write([]byte{1})
		io.ReadFull(c, make([]byte, 1))
		c.Close()
	}
	b.StopTimer()
	runtime.GC()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	used := (after.HeapInuse + after.StackInuse) - (before.HeapInuse + before.StackInuse)
	b.ReportMetric(float64(used)/float64(b.N), "bytes/session")
	for _, p := range all {
		p.eng.Close()
		p.ns.Close()
	}
}
